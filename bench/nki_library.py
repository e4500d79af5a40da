"""Interpreter speed on AWS's NKI library kernels: each kernel that runs here (issue 30) against
the equivalent torch CPU op at the same shape and dtype, same inputs, same run.

    python bench/nki_library.py --nki-library /path/to/nki-library [--reps 7] [--only NAME]

The library (github.com/aws-neuron/nki-library) is not part of this repository; pass a checkout
(docs/nki.md, "AWS's NKI library"). Each kernel runs through ``nki.simulate`` on CPU tensors (the
library harness's simulation mode); each torch peer is the straightforward torch expression of
the kernel's documented result. Every kernel's output is checked against its peer first. After
one warm-up call each (the kernel's specialisation), kernel and peer take turns --reps times;
the table gives medians. Both sides run at one thread and at their
default thread count (torch's intra-op threads; the interpreter's partition threads,
nki._nki.interpreter_threads(), which split its large instructions over partition ranges where
the host leaves their cores free), and
each is compared with the other at the same count, and the faster of each with the faster of the
other. The column before the last compares the calling
thread's CPU time of the one-thread kernel and one-thread torch: on a shared host it leaves out
the time either waited for a core. The last, the kernel's calling-thread CPU time at its
default thread count over that at one thread, is the share of the work its thread kept (the
workers ran the rest): on a host with a free core per worker, the wall time follows it. In
brackets, the partition ranges the workers ran per call at the default count: 0 where the
automatic count found no core free (another process runnable, /proc/loadavg) and split nothing.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def _library_path(root):
    src = os.path.join(root, "src", "nkilib_src")
    if not os.path.isdir(os.path.join(src, "nkilib")):
        sys.exit(f"{root} is not a checkout of github.com/aws-neuron/nki-library "
                 "(no src/nkilib_src/nkilib)")
    sys.path.insert(0, src)


def _rope_contiguous(x, cos, sin):
    # x [d, B, H, S]; cos / sin [d/2, B, S]: out = [x1 cos - x2 sin, x2 cos + x1 sin]
    h = x.shape[0] // 2
    x1, x2 = x[:h], x[h:]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=0)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def cases(dtype):
    """(name, shape text, kernel call, torch call, tolerance) for each library kernel that runs."""
    import nki
    from nkilib.core.cumsum.cumsum import cumsum
    from nkilib.core.embeddings.rope import RoPE
    from nkilib.core.embeddings.rope_hf import rope_hf
    from nkilib.core.max.cascaded_max import cascaded_max
    from nkilib.experimental.conv.conv1d import conv1d
    from nkilib.experimental.conv.depthwise_conv1d import depthwise_conv1d_implicit_gemm

    g = torch.Generator().manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(dtype)

    out = []

    x = rnd(1024, 4096)
    out.append(("cumsum", "[1024, 4096], last axis",
                lambda x=x: nki.simulate(cumsum)(x),
                lambda x=x: torch.cumsum(x, dim=-1)))

    x, c, s = rnd(128, 8, 8, 128), rnd(64, 8, 128), rnd(64, 8, 128)
    out.append(("RoPE", "x [128, 8, 8, 128], cos/sin [64, 8, 128]",
                lambda x=x, c=c, s=s: nki.simulate(RoPE)(x, c, s),
                lambda x=x, c=c, s=s: _rope_contiguous(x, c, s)))

    q, k, c, s = rnd(1, 8, 1024, 128), rnd(1, 8, 1024, 128), rnd(1024, 128), rnd(1024, 128)

    def rope_hf_nki(q=q, k=k, c=c, s=s):
        qo, ko = torch.empty_like(q), torch.empty_like(k)
        nki.simulate(rope_hf)(q, k, qo, ko, c, s)
        return qo, ko

    out.append(("rope_hf", "q, k [1, 8, 1024, 128]", rope_hf_nki,
                lambda q=q, k=k, c=c, s=s: (q * c + _rotate_half(q) * s,
                                            k * c + _rotate_half(k) * s)))

    x = rnd(128, 16384)

    out.append(("cascaded_max", "[128, 16384] -> value, index",
                lambda x=x: nki.simulate(cascaded_max)(x),
                lambda x=x: torch.max(x, dim=-1)))

    x, w, b = rnd(2, 256, 1024), rnd(3, 256, 256) * 0.05, rnd(256)
    out.append(("conv1d", "x [2, 256, 1024], K 3, C_out 256, bias",
                lambda x=x, w=w, b=b: nki.simulate(conv1d)(x, w, b),
                lambda x=x, w=w, b=b: F.conv1d(x, w.permute(2, 1, 0), b)))

    x, w = rnd(2, 256, 1, 1024), rnd(256, 1, 1, 4)
    out.append(("depthwise_conv1d", "x [2, 256, 1, 1024], S 4",
                lambda x=x, w=w: nki.simulate(depthwise_conv1d_implicit_gemm)(
                    x, w, feature_group_count=256),
                lambda x=x, w=w: F.conv2d(x, w, groups=256)))
    return out


def _flat(result):
    results = result if isinstance(result, (tuple, list)) else (result,)
    return [r.reshape(-1).float() for r in results]


def _time(fn, cpu=None):
    """Wall seconds of fn(); with a list `cpu`, also appends the calling thread's CPU seconds
    (on a shared host these leave out the time the thread waited for a core)."""
    c0, t0 = time.thread_time(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(time.thread_time() - c0)
    return wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nki-library", default=os.environ.get("NKI_LIBRARY"), required=False)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--only", action="append", help="run only these kernels (repeatable)")
    args = parser.parse_args()
    if not args.nki_library:
        sys.exit("pass --nki-library /path/to/nki-library (or set NKI_LIBRARY)")
    _library_path(args.nki_library)
    dtype = getattr(torch, args.dtype)
    default_threads = torch.get_num_threads()
    from nki import _nki
    kernel_threads = _nki.interpreter_threads()
    print(f"NKI library kernels vs torch CPU, {args.dtype}; torch {torch.__version__}; "
          f"threads: torch 1 / {default_threads}, interpreter 1 / {kernel_threads}; medians of "
          f"{args.reps} alternating repetitions; load average {os.getloadavg()[0]:.1f}")
    print(f"| kernel | shape | interpreter ms (1 / {kernel_threads} threads) | torch ms "
          f"(1 / {default_threads}) | 1 thread: kernel / torch | default threads: kernel / torch "
          "| faster of each: kernel / torch | CPU time, 1 thread: kernel / torch "
          f"| kernel's calling thread CPU, {kernel_threads} / 1 threads (worker ranges a call) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, shape, kernel, peer in cases(dtype):
        if args.only and name not in args.only:
            continue
        got, want = _flat(kernel()), _flat(peer())
        for g_, w_ in zip(got, want):
            err = (g_ - w_).abs().max().item()
            scale = w_.abs().max().item()
            # a sanity check that the two compute the same thing (the library's own tests check
            # the numbers against their references with the derived tolerances)
            if len(got) != len(want) or not err <= 1e-2 * max(scale, 1.0):
                sys.exit(f"{name}: kernel and torch peer disagree (max abs error {err:g} of "
                         f"{scale:g}); the comparison would be meaningless")
        k1, kn, t1, tn, ck, ckn, c1 = [], [], [], [], [], [], []
        ranges = 0
        for _ in range(args.reps):
            torch.set_num_threads(1)
            _nki.set_interpreter_threads(1)
            k1.append(_time(kernel, ck))
            t1.append(_time(peer, c1))
            torch.set_num_threads(default_threads)
            # the interpreter's default: automatic (NRTSIM_NKI_THREADS unset), its threads
            # used only while the host leaves their cores free
            _nki.set_interpreter_threads(0)
            before = _nki.worker_task_count()
            kn.append(_time(kernel, ckn))
            ranges += _nki.worker_task_count() - before
            tn.append(_time(peer))
        mk1, mkn, m1, mn, mck, mckn, mc1 = (statistics.median(t) * 1e3
                                            for t in (k1, kn, t1, tn, ck, ckn, c1))
        print(f"| {name} | {shape} | {mk1:.2f} / {mkn:.2f} | {m1:.2f} / {mn:.2f} | "
              f"{mk1 / m1:.2f}x | {mkn / mn:.2f}x | {min(mk1, mkn) / min(m1, mn):.2f}x | "
              f"{mck / mc1:.2f}x ({mck:.2f} / {mc1:.2f} ms) | {mckn / mck:.2f}x "
              f"({ranges / args.reps:.0f}) |",
              flush=True)


if __name__ == "__main__":
    main()
