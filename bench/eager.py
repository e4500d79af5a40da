"""Eager benchmark: neuron (nrtsim) against the CPU, side by side in one run, medians.

(a) dispatch latency of small ops: add of two 16-element tensors, a view, a .sum();
(b) a tiny Llama (hidden 256, 4 layers, 4 heads, seq 128, batch 8): forward + backward + AdamW;
(c) GEMM 2048 x 2048 x 2048 in float32 and bfloat16, GFLOP/s.

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


def median_seconds(fn, inner: int, repeats: int = REPEATS, sync=None) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        if sync:
            sync()
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


def sync_for(device: str):
    return torch.neuron.synchronize if device == "neuron" else None


def dispatch_latency(device: str) -> dict:
    a = torch.randn(16, device=device)
    b = torch.randn(16, device=device)
    m = torch.randn(4, 4, device=device)
    return {
        "add (16 elements)": median_seconds(lambda: a + b, 2000, sync=sync_for(device)),
        "view": median_seconds(lambda: m.view(16), 2000, sync=sync_for(device)),
        "sum()": median_seconds(lambda: a.sum(), 2000, sync=sync_for(device)),
    }


def llama_step(device: str) -> float:
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

    return median_seconds(step, 1, repeats=5, sync=sync_for(device))


def gemm_gflops(device: str, dtype: torch.dtype, n: int = 2048) -> float:
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    seconds = median_seconds(lambda: a @ b, 1, repeats=5, sync=sync_for(device))
    return 2 * n**3 / seconds / 1e9


def run() -> list:
    rows = []
    lat_n, lat_c = dispatch_latency("neuron"), dispatch_latency("cpu")
    for name in lat_n:
        rows.append((f"(a) latency: {name}", lat_n[name] * 1e6, lat_c[name] * 1e6, "µs",
                     lat_n[name] / lat_c[name], "≤ 1.5× CPU time"))
    step_n, step_c = llama_step("neuron"), llama_step("cpu")
    rows.append(("(b) tiny Llama fwd+bwd+AdamW", step_n * 1e3, step_c * 1e3, "ms", step_n / step_c,
                 "≤ 1.10× CPU time"))
    for dtype in (torch.float32, torch.bfloat16):
        g_n, g_c = gemm_gflops("neuron", dtype), gemm_gflops("cpu", dtype)
        rows.append((f"(c) GEMM 2048³ {str(dtype).replace('torch.', '')}", g_n, g_c, "GFLOP/s",
                     g_n / g_c, "≥ 0.95× CPU GFLOP/s"))
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
                 f">= 5 repetitions, neuron and CPU in one run (`make bench`).\n\n{text}\n{end}")
        if start in content:
            content = content[: content.index(start)] + block + content[content.index(end) + len(end):]
        else:
            content += f"\n## Eager (`bench/eager.py`)\n\n{block}\n"
        path.write_text(content)


if __name__ == "__main__":
    main()
