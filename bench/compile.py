"""Compile benchmark (issue 10): torch.compile(backend="neuron") against eager neuron and against
Inductor on the CPU, side by side in one run, on the eager benchmark's tiny Llama (hidden 256,
4 layers, 4 heads, vocabulary 1024).

(a) training step: batch 8 x 128 tokens, forward + backward (the model compiled) + AdamW (eager);
(b) one-token decode step: batch 1, a static KV cache of 256 positions filled to 128, no grad;
    measured twice: one call per turn (every call starts with the caches another variant left)
    and steady, as a generate() loop runs it (per turn one untimed call, then 5 timed);
(c) compile time of the training step's first call (compile + run): cold (empty program cache
    and empty Inductor cache, a fresh process) and warm (a fresh process over the caches the cold
    run left: TorchNeuron's "cache hit after restart"), neuron against Inductor on the CPU.

Steps: medians of 12 repetitions, the variants taking turns within each repetition so a slow
spell of the machine falls on all alike, in an order that rotates each repetition. Compile
times: medians of --compile-repeats (>= 5) fresh processes each, neuron and Inductor alternating.

    python bench/compile.py                 # prints the table
    python bench/compile.py --write         # also rewrites the table in docs/benchmarks.md
    python bench/compile.py --skip-compile  # steps only (the compile part takes minutes)
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import torch_neuronx  # noqa: F401

REPEATS = 12  # a multiple of the four variants: each takes each slot of the rotation alike
DECODE_BURST = 5  # timed calls per turn in the steady decode measurement (after one untimed)
VOCAB, BATCH, SEQ, CACHE_LEN = 1024, 8, 128, 256


def tiny_llama(device: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=CACHE_LEN)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(device)


def _compiler(variant: str):
    if variant == "neuron compiled":
        return "neuron", lambda m: torch.compile(m, backend="neuron")
    if variant == "neuron eager":
        return "neuron", lambda m: m
    if variant == "CPU Inductor":
        return "cpu", lambda m: torch.compile(m, backend="inductor")
    return "cpu", lambda m: m  # CPU eager


def training_step(variant: str):
    device, compile_ = _compiler(variant)
    model = tiny_llama(device)
    run = compile_(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    ids = ids.to(device)

    def step():
        loss = run(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def decode_step(variant: str):
    from transformers import StaticCache

    device, compile_ = _compiler(variant)
    model = tiny_llama(device).eval()
    cache = StaticCache(config=model.config, max_cache_len=CACHE_LEN)
    prompt = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # prefill, eager: the benchmark times the decode step
        model(input_ids=prompt.to(device), past_key_values=cache,
              cache_position=torch.arange(SEQ, device=device), use_cache=True)
    run = compile_(model)
    token = torch.tensor([[7]], device=device)
    position = torch.tensor([SEQ], device=device)

    calls = [0]

    def step():
        # Every call does the same work: attention over the whole static cache (256 positions,
        # masked). transformers' StaticCache writes at its own counter, which each call
        # advances past the prompt (the `cache_position` argument does not choose the slot), so
        # at most CACHE_LEN - SEQ calls fit; more would index past the cache.
        calls[0] += 1
        if calls[0] > CACHE_LEN - SEQ:
            raise RuntimeError(f"decode_step: more than {CACHE_LEN - SEQ} calls overflow the "
                               f"static cache; lower --repeats")
        with torch.no_grad():
            return run(input_ids=token, past_key_values=cache, cache_position=position,
                       use_cache=True).logits

    return step


def sync(device: str):
    if device == "neuron":
        torch.neuron.synchronize()


def ready_steps(make, variants, warmup=2) -> dict:
    """Each variant's step, compiled and run `warmup` times (compiles, then one steady call)."""
    steps = {v: make(v) for v in variants}
    for v, step in steps.items():
        for _ in range(warmup):
            step()
        sync(_compiler(v)[0])
    return steps


def taking_turns(steps: dict, repeats=REPEATS, burst=1) -> dict:
    """Median seconds per call of each variant's step, the variants taking turns. The order
    rotates by one each repetition, so every variant runs after every other equally often: the
    step before evicts caches (each variant has its own weights; four models' exceed the last
    level cache), and a fixed order measured the same program up to 10% slower in the slot
    after the CPU eager step than in another slot.

    burst=1: one call per turn, so every timed call starts with caches another variant left.
    burst>1: a turn is one untimed call, then `burst` timed calls back to back, and the turn's
    sample is their median: the steady state of a loop over one model (a decode loop), still
    taking turns so that a slow spell of the machine falls on all variants alike."""
    variants = list(steps)
    times = {v: [] for v in variants}
    order = list(variants)
    for _ in range(repeats):
        for v in order:
            device = _compiler(v)[0]
            if burst > 1:
                steps[v]()
            calls = []
            for _ in range(burst):
                sync(device)
                start = time.perf_counter()
                steps[v]()
                sync(device)
                calls.append(time.perf_counter() - start)
            times[v].append(statistics.median(calls))
        order = order[1:] + order[:1]
    return {v: statistics.median(t) for v, t in times.items()}


_FIRST_CALL = """
import json, sys, time
start = time.perf_counter()
import torch, torch_neuronx
sys.path.insert(0, {bench_dir!r})
from compile import training_step
step = training_step({variant!r})
ready = time.perf_counter()
step()
if {variant!r}.startswith("neuron"):
    torch.neuron.synchronize()
first = time.perf_counter() - ready
m = torch.neuron.get_dynamo_metrics()
print(json.dumps({{"first_call": first, "total": time.perf_counter() - start,
                  "hits": m["cache_hits"], "misses": m["cache_misses"]}}))
"""


def first_call_seconds(variant: str, neff_dir: str, inductor_dir: str) -> dict:
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=neff_dir,
               TORCHINDUCTOR_CACHE_DIR=inductor_dir)
    code = _FIRST_CALL.format(bench_dir=str(Path(__file__).resolve().parent), variant=variant)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"{variant} compile run failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def compile_times(repeats: int) -> dict:
    """Cold and warm first-call seconds of the training step, per compiled variant: each
    repetition starts from empty caches (cold) and then runs again over them (warm)."""
    out = {v: {"cold": [], "warm": [], "warm_hits": []} for v in ("neuron compiled",
                                                                   "CPU Inductor")}
    for _ in range(repeats):
        for variant in out:
            with tempfile.TemporaryDirectory() as neff, tempfile.TemporaryDirectory() as ind:
                cold = first_call_seconds(variant, neff, ind)
                warm = first_call_seconds(variant, neff, ind)
            out[variant]["cold"].append(cold["first_call"])
            out[variant]["warm"].append(warm["first_call"])
            out[variant]["warm_hits"].append(warm["hits"])
    return {v: {"cold": statistics.median(r["cold"]), "warm": statistics.median(r["warm"]),
                "warm_hits": min(r["warm_hits"])} for v, r in out.items()}


def run(args) -> list:
    rows = []
    variants = ("neuron compiled", "neuron eager", "CPU Inductor", "CPU eager")
    steps = () if args.skip_steps else (("(a) training step", training_step),
                                         ("(b) decode step", decode_step))
    for name, make in steps:
        ready = ready_steps(make, variants)
        measured = [(name, taking_turns(ready, repeats=args.repeats))]
        if "decode" in name:
            # The same steps (the static cache holds CACHE_LEN - SEQ calls in all), now in the
            # steady state a generate() loop runs them in.
            measured.append((f"{name}, steady (bursts of {DECODE_BURST} calls)",
                             taking_turns(ready, repeats=args.repeats, burst=DECODE_BURST)))
        for label, t in measured:
            print(label, {k: round(v * 1e3, 2) for k, v in t.items()}, flush=True)
            rows.append((f"{label}: compiled neuron / Inductor CPU", t["neuron compiled"] * 1e3,
                         t["CPU Inductor"] * 1e3, "ms", t["neuron compiled"] / t["CPU Inductor"],
                         "≤ 1.0×"))
            rows.append((f"{label}: compiled neuron / eager neuron", t["neuron compiled"] * 1e3,
                         t["neuron eager"] * 1e3, "ms", t["neuron compiled"] / t["neuron eager"],
                         "≤ 0.5× (decode)" if "decode" in label else "recorded"))
            rows.append((f"{label}: Inductor CPU / eager CPU", t["CPU Inductor"] * 1e3,
                         t["CPU eager"] * 1e3, "ms", t["CPU Inductor"] / t["CPU eager"],
                         "reference"))
    if not args.skip_compile:
        c = compile_times(args.compile_repeats)
        print("(c)", c, flush=True)
        n, i = c["neuron compiled"], c["CPU Inductor"]
        rows.append(("(c) cold compile + first step: neuron / Inductor", n["cold"], i["cold"],
                     "s", n["cold"] / i["cold"], "≤ 1.2×"))
        rows.append(("(c) warm (restart, cache hit): neuron warm / neuron cold", n["warm"],
                     n["cold"], "s", n["warm"] / n["cold"],
                     f"≤ 0.25× ({n['warm_hits']} programs from the cache)"))
        rows.append(("(c) warm (restart, cache hit): Inductor warm / Inductor cold", i["warm"],
                     i["cold"], "s", i["warm"] / i["cold"], "reference"))
    return rows


def table(rows: list) -> str:
    lines = ["| benchmark | first | second | unit | first / second | target |",
             "|---|---:|---:|---|---:|---|"]
    for name, a, b, unit, ratio, target in rows:
        lines.append(f"| {name} | {a:.2f} | {b:.2f} | {unit} | {ratio:.3f} | {target} |")
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    load = os.getloadavg()
    return (f"{platform.machine()} ({_cpu_model()}), {os.cpu_count()} cores, "
            f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, "
            f"load average at the end {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="rewrite the table in docs/benchmarks.md")
    parser.add_argument("--skip-compile", action="store_true",
                        help="skip the cold/warm compile-time part")
    parser.add_argument("--skip-steps", action="store_true",
                        help="only the cold/warm compile-time part")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--compile-repeats", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = run(args)
    text = table(rows)
    print(text)
    print(f"\nmachine: {machine()}; load average at the start {load_before:.2f}")
    if args.write:
        path = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
        content = path.read_text()
        start, end = "<!-- compile:start -->", "<!-- compile:end -->"
        block = (f"{start}\nMeasured {time.strftime('%Y-%m-%d')} on {machine()} (start: "
                 f"{load_before:.2f}); steps: medians of {args.repeats} repetitions, the four "
                 f"variants taking turns in a rotating order, one call per turn (caches left by "
                 f"another variant) or, for the steady decode rows, one untimed and "
                 f"{DECODE_BURST} timed calls per turn; compile: medians of "
                 f"{args.compile_repeats} fresh processes each (`python bench/compile.py`).\n\n{text}\n{end}")
        if start in content:
            content = content[: content.index(start)] + block + content[content.index(end)
                                                                        + len(end):]
        else:
            content += f"\n## torch.compile (`bench/compile.py`)\n\n{block}\n"
        path.write_text(content)


if __name__ == "__main__":
    main()
