"""Interpreter speed: the NKI flash-attention forward kernel (examples/nki) against torch's
scaled_dot_product_attention on the CPU, same inputs, same run.

    python bench/nki.py [--seq 2048] [--head-dim 128] [--reps 5] [--threads N]

Prints medians of --reps timed calls (after one warm-up call, which also specialises the kernel)
and the ratio interpreter / SDPA; target <= 3x (docs/benchmarks.md, section NKI).
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples", "nki"))
from flash_attention import flash_attention_fwd  # noqa: E402


def median_seconds(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), statistics.pstdev(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for both sides: torch.set_num_threads for SDPA and the "
                        "interpreter's partition threads (default: each side's own default)")
    args = parser.parse_args()
    from nki import _nki
    if args.threads:
        torch.set_num_threads(args.threads)
        _nki.set_interpreter_threads(args.threads)
    torch.manual_seed(0)
    q, k, v = (torch.randn(args.seq, args.head_dim, dtype=torch.bfloat16) for _ in range(3))
    qn, kn, vn = q.to("neuron"), k.to("neuron"), v.to("neuron")
    rows = []

    def sdpa(dtype):
        return lambda: F.scaled_dot_product_attention(q[None].to(dtype), k[None].to(dtype),
                                                      v[None].to(dtype))

    def nki_neuron():
        flash_attention_fwd(qn, kn, vn)
        torch.neuron.synchronize()

    def nki_cpu():
        flash_attention_fwd(q, k, v)

    ranges = _nki.worker_task_count()
    for name, fn in (("torch SDPA, CPU, bf16", sdpa(torch.bfloat16)),
                     ("torch SDPA, CPU, fp32", sdpa(torch.float32)),
                     ("NKI flash attention on neuron (interpreter)", nki_neuron),
                     ("NKI flash attention on CPU tensors (interpreter)", nki_cpu)):
        med, sd = median_seconds(fn, args.reps)
        rows.append((name, med, sd))
    # partition ranges the interpreter's worker threads ran, per kernel call (0: every
    # instruction ran on the calling thread, as where the automatic count finds no core free)
    ranges = (_nki.worker_task_count() - ranges) / (2 * (args.reps + 1))
    base = min(rows[0][1], rows[1][1])
    print(f"flash attention forward, seq {args.seq}, head dim {args.head_dim}, bf16 inputs; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, interpreter "
          f"{_nki.interpreter_threads()} (its workers ran {ranges:.0f} ranges a call), medians of "
          f"{args.reps}; load average {os.getloadavg()[0]:.1f}")
    for name, med, sd in rows:
        print(f"  {name:50s} {med * 1e3:8.2f} ms (sd {sd * 1e3:.2f})  {med / base:5.2f}x")
    run = flash_attention_fwd.last_run
    print(f"  modelled on one NeuronCore-v3: {run.makespan_ns / 1e3:.1f} us, {run.tflops:.1f} "
          f"TFLOP/s, MFU {run.mfu:.1%}")


if __name__ == "__main__":
    main()
