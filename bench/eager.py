"""Eager benchmark: neuron (nrtsim) against the CPU, side by side in one run, medians.

(a) dispatch latency of small ops: add of two 16-element tensors, a view, a .sum();
(b) a tiny Llama (hidden 256, 4 layers, 4 heads, seq 128, batch 8): forward + backward + AdamW;
(c) GEMM 2048 x 2048 x 2048 in float32 and bfloat16, GFLOP/s;
(d) the quickstart's training loop (examples/quickstart.py: 60 steps of a small MLP);
(e) the profiler's overhead: the quickstart loop on neuron under torch.profiler (CPU and
    PrivateUse1 activities) against the same loop unprofiled.

    make bench                       # prints the table
    python bench/eager.py --write    # also rewrites the table in docs/benchmarks.md
"""

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import torch

import torch_neuronx  # noqa: F401

REPEATS = 7


def sync_for(device: str):
    return torch.neuron.synchronize if device == "neuron" else None


def paired_medians(make, inner: int, repeats: int = REPEATS) -> dict:
    """Median seconds per call of `make(device)()` on neuron and on CPU. The devices take turns
    within each repetition, so a slow spell of the machine (other tenants, frequency changes)
    falls on both alike instead of on whichever device ran second."""
    fns = {device: make(device) for device in ("neuron", "cpu")}
    times = {device: [] for device in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(repeats):
        for device, fn in fns.items():
            sync = sync_for(device)
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            if sync:
                sync()
            times[device].append((time.perf_counter() - start) / inner)
    return {device: statistics.median(t) for device, t in times.items()}


def small_ops(device: str) -> dict:
    a = torch.randn(16, device=device)
    b = torch.randn(16, device=device)
    m = torch.randn(4, 4, device=device)
    return {"add (16 elements)": lambda: a + b, "view": lambda: m.view(16), "sum()": lambda: a.sum()}


def llama_step(device: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 1024, (8, 128), generator=torch.Generator().manual_seed(0)).to(device)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def gemm(device: str, dtype: torch.dtype, n: int):
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    return lambda: a @ b


def quickstart_loop(device: str):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import quickstart

    return lambda: quickstart.train(device)


def profiled_quickstart_overhead(repeats: int = REPEATS):
    """Median seconds of the quickstart loop on neuron with and without torch.profiler, taking
    turns; None when the profiler cannot record neuron activity here."""
    from torch.profiler import ProfilerActivity, profile

    loop = quickstart_loop("neuron")
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    try:
        with profile(activities=activities):
            loop()
    except Exception as error:  # report, don't fail the benchmark
        print(f"(e) skipped: the profiler failed: {error}")
        return None
    on, off = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        with profile(activities=activities):
            loop()
        on.append(time.perf_counter() - start)
        start = time.perf_counter()
        loop()
        off.append(time.perf_counter() - start)
    return statistics.median(on), statistics.median(off)


def run() -> list:
    rows = []
    for name in small_ops("cpu"):
        t = paired_medians(lambda d, name=name: small_ops(d)[name], 2000)
        target = "≤ 1.2× CPU time" if name.startswith("add") else "≤ 1.5× CPU time"
        rows.append((f"(a) latency: {name}", t["neuron"] * 1e6, t["cpu"] * 1e6, "µs",
                     t["neuron"] / t["cpu"], target))
    t = paired_medians(llama_step, 1, repeats=11)
    rows.append(("(b) tiny Llama fwd+bwd+AdamW", t["neuron"] * 1e3, t["cpu"] * 1e3, "ms",
                 t["neuron"] / t["cpu"], "≤ 1.05× CPU time"))
    n = 2048
    for dtype in (torch.float32, torch.bfloat16):
        t = paired_medians(lambda d, dtype=dtype: gemm(d, dtype, n), 1, repeats=15)
        g_n, g_c = 2 * n**3 / t["neuron"] / 1e9, 2 * n**3 / t["cpu"] / 1e9
        rows.append((f"(c) GEMM 2048³ {str(dtype).replace('torch.', '')}", g_n, g_c, "GFLOP/s",
                     g_n / g_c, "≥ 0.95× CPU GFLOP/s"))
    t = paired_medians(quickstart_loop, 1, repeats=9)
    rows.append(("(d) quickstart loop (60 steps)", t["neuron"] * 1e3, t["cpu"] * 1e3, "ms",
                 t["neuron"] / t["cpu"], "≤ 1.2× CPU time"))
    overhead = profiled_quickstart_overhead()
    if overhead is not None:
        on, off = overhead
        rows.append(("(e) quickstart loop, neuron: profiler on / off", on * 1e3, off * 1e3, "ms",
                     on / off, "recorded (columns: on, off)"))
    return rows


def table(rows: list) -> str:
    lines = ["| benchmark | neuron | CPU | unit | neuron / CPU | target |",
             "|---|---:|---:|---|---:|---|"]
    for name, n, c, unit, ratio, target in rows:
        lines.append(f"| {name} | {n:.2f} | {c:.2f} | {unit} | {ratio:.3f} | {target} |")
    return "\n".join(lines)


def machine() -> str:
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the table in docs/benchmarks.md")
    args = parser.parse_args()
    rows = run()
    text = table(rows)
    print(text)
    print(f"\nmachine: {machine()}")
    if args.write:
        path = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
        content = path.read_text() if path.exists() else "# Benchmarks\n"
        start, end = "<!-- eager:start -->", "<!-- eager:end -->"
        block = (f"{start}\nMeasured {time.strftime('%Y-%m-%d')} on {machine()}; medians of "
                 f">= 7 repetitions, neuron and CPU taking turns within each (`make bench`).\n\n{text}\n{end}")
        if start in content:
            content = content[: content.index(start)] + block + content[content.index(end) + len(end):]
        else:
            content += f"\n## Eager (`bench/eager.py`)\n\n{block}\n"
        path.write_text(content)


if __name__ == "__main__":
    main()
