"""Collective bandwidth of the "neuron" process group against Gloo, side by side in one run.

Starts 4 ranks (one process per NeuronCore, as torchrun would) on this host. For all_reduce,
all_gather_into_tensor and reduce_scatter_tensor from 4 KiB to 256 MiB, every rank times the same
operation, repetitions taking turns, on neuron tensors over two neuron groups — the default
transport (from 128 KiB single copy through mapped device memory: each rank reads its peers'
buffers directly, mapped read-only; below that the shared-memory slots) and one held to the slots
at every size (NRTSIM_COLLECTIVE_SINGLE_COPY=0) — and on CPU tensors of the same size and contents
over a Gloo group. As NCCL-tests do, a repetition times a run of back-to-back calls (20 up to
1 MiB, 8 at 4 MiB, 2 at 16 MiB, one from 64 MiB) after a barrier of the same group, so that what is measured
is the operation and not how far apart the ranks leave the barrier; the slowest rank's time per
call counts, the median of the repetitions is reported, and as bus bandwidth (NCCL-tests
convention: size x 2(n-1)/n for all_reduce, size x (n-1)/n for the others, where size is the
largest buffer).

The limit is this host's memcpy bandwidth, measured here two ways: one thread alone (the usual
figure), and the ranks all copying 256 MiB at once, one thread each (what the collectives really
share when there are more ranks than cores); the latter's per-rank share is the fair reference for
a bus bandwidth. An all_reduce must at least read and write every rank's whole buffer once, so a
concurrent memcpy of the buffer on every rank is its floor, reported as a fraction.
Last, the TP x FSDP training step of the tiny Llama (TP=2 x FSDP=2) on neuron vs the same step on
CPU with Gloo.

    python bench/collectives.py [--min-kib 4] [--max-mib 256] [--reps 12] [--ranks 4] [--skip-step]
                                [--legacy-names] [--pin]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "distributed"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args) -> int:
    port = free_port()
    procs = []
    for rank in range(args.ranks):
        env = dict(os.environ)
        env.update(
            RANK=str(rank), WORLD_SIZE=str(args.ranks), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port), NEURON_RT_VISIBLE_CORES=str(rank % 4), OMP_NUM_THREADS="1",
            PYTHONWARNINGS="ignore",
        )
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", *sys.argv[1:]], env=env))
    return max(p.wait() for p in procs)


def memcpy_seconds(nbytes: int, reps: int) -> float:
    """Median time of one single-thread copy of `nbytes` (buffers touched first)."""
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.zeros_like(src)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def worker(args) -> None:
    if args.pin:
        # Before torch starts any thread, so that every thread of the rank (Gloo's included) keeps
        # to the rank's core.
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[int(os.environ["RANK"]) % len(cores)]})
    import torch
    import torch.distributed as dist

    import torch_neuronx  # noqa: F401

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Both backends in one world: neuron tensors go to "neuron", CPU tensors to Gloo.
    dist.init_process_group("cpu:gloo,neuron:neuron")
    neuron = dist.new_group(backend="neuron")
    # The transport reads its settings when the group is made: this one keeps to the slots.
    os.environ["NRTSIM_COLLECTIVE_SINGLE_COPY"] = "0"
    slots = dist.new_group(backend="neuron")
    del os.environ["NRTSIM_COLLECTIVE_SINGLE_COPY"]
    gloo = dist.new_group(backend="gloo")
    dev = torch.device("neuron")

    def slowest(seconds: float) -> float:
        t = torch.tensor([seconds])
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return t.item()

    def timed(fn, sync) -> float:
        times = []
        fn()  # warm-up: first touch of buffers and shared memory
        for _ in range(args.reps):
            dist.barrier(group=gloo)
            t = time.perf_counter()
            fn()
            sync()
            times.append(slowest(time.perf_counter() - t))
        return statistics.median(times)

    def timed_in_turns(variants, calls) -> dict:
        """variants: name -> (fn, sync, group). Repetitions alternate between them, so that load
        from other jobs falls on all alike, in an order that rotates each repetition (the same on
        every rank), so that no variant always follows the same one: what runs before leaves
        caches and scheduling in its own state. Each repetition: a barrier of the variant's own
        group, then `calls` back-to-back calls; the time per call."""
        times = {name: [] for name in variants}
        for fn, _, _ in variants.values():
            fn()  # warm-up: first touch of buffers and shared memory
        order = list(variants)
        for _ in range(args.reps):
            for name in order:
                fn, sync, group = variants[name]
                dist.barrier(group=group)
                t = time.perf_counter()
                for _ in range(calls):
                    fn()
                sync()
                times[name].append(slowest((time.perf_counter() - t) / calls))
            order = order[1:] + order[:1]
        return {name: statistics.median(v) for name, v in times.items()}

    # torch 2.13 renamed the one-tensor forms (all_gather_single, reduce_scatter_single); the old
    # names still work but go through a deprecation wrapper that warns on every call, a per-call
    # cost of the caller's, not of either backend. --legacy-names measures the old names.
    legacy = args.legacy_names or not hasattr(dist, "all_gather_single")
    all_gather = dist.all_gather_into_tensor if legacy else dist.all_gather_single
    reduce_scatter = dist.reduce_scatter_tensor if legacy else dist.reduce_scatter_single

    def make(op, n, group, device):
        if op == "all_reduce":
            x = torch.ones(n, device=device)
            return lambda: dist.all_reduce(x, group=group), 2 * (world - 1) / world
        if op == "all_gather_into_tensor":
            out = torch.empty(n, device=device)
            inp = torch.ones(n // world, device=device)
            return lambda: all_gather(out, inp, group=group), (world - 1) / world
        out = torch.empty(n // world, device=device)
        inp = torch.ones(n, device=device)
        return lambda: reduce_scatter(out, inp, group=group), (world - 1) / world

    # memcpy references: one thread alone (rank 0, the others waiting), then every rank at once.
    big = args.max_mib << 20
    dist.barrier(group=gloo)
    alone = memcpy_seconds(big, args.reps) if rank == 0 else 0.0
    dist.barrier(group=gloo)
    concurrent = []
    for _ in range(args.reps):
        dist.barrier(group=gloo)
        concurrent.append(slowest(memcpy_seconds(big, 1)))
    concurrent = statistics.median(concurrent)

    rows = []
    size = args.min_kib << 10
    while size <= big:
        n = size // 4
        calls = max(1, min(20, (32 << 20) // size))  # 20 up to 1 MiB, 8, 2, then 1 from 64 MiB
        for op in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"):
            variants, factor = {}, 1.0
            for name, group, device in (("neuron", neuron, dev), ("slots", slots, dev),
                                        ("gloo", gloo, torch.device("cpu"))):
                fn, factor = make(op, n, group, device)
                sync = torch.neuron.synchronize if device.type == "neuron" else (lambda: None)
                variants[name] = (fn, sync, group)
            t = timed_in_turns(variants, calls)
            results = {name: (sec, size * factor / sec / 1e9) for name, sec in t.items()}
            rows.append((op, size, results))
            if rank == 0:
                (tn, bn), (ts, bs), (tg, bg) = results["neuron"], results["slots"], results["gloo"]
                print(f"{op:24s} {size / 1024:>10.0f} KiB  neuron {tn * 1e6:9.1f} us {bn:6.2f} GB/s   "
                      f"slots-only {ts * 1e6:9.1f} us {bs:6.2f} GB/s   gloo {tg * 1e6:9.1f} us {bg:6.2f} GB/s   "
                      f"neuron x{tg / tn:5.2f} gloo, slots-only x{tg / ts:5.2f} gloo, "
                      f"neuron x{ts / tn:5.2f} slots-only", flush=True)
            del variants
        size *= 4

    if rank == 0:
        share = big / concurrent / 1e9
        print(f"host memcpy bandwidth ({args.max_mib} MiB): 1 thread alone {big / alone / 1e9:.2f} GB/s; "
              f"{world} ranks at once, 1 thread each: {world * share:.2f} GB/s in all, {share:.2f} GB/s per rank",
              flush=True)
        for op, size, results in rows:
            if size != big:
                continue
            for name in ("neuron", "slots"):
                sec, bw = results[name]
                line = (f"at {args.max_mib} MiB {op} ({name}): {bw:.2f} GB/s bus bandwidth = "
                        f"{100 * bw / (big / alone / 1e9):.0f}% of 1-thread memcpy, {100 * bw / share:.0f}% of "
                        f"the per-rank share of concurrent memcpy")
                if op == "all_reduce":
                    line += f"; {100 * concurrent / sec:.0f}% of the one-memcpy-per-rank floor"
                print(line, flush=True)

    if args.skip_step:
        dist.barrier(group=gloo)
        dist.destroy_process_group()
        return

    # The TP x FSDP step of the tiny Llama: neuron group vs the same step on CPU with Gloo.
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import tiny_llama as tl

    def step_time(device_type):
        mesh = init_device_mesh(device_type, (2, world // 2), mesh_dim_names=("dp", "tp"))
        device = torch.device(device_type)
        model = tl.apply_tp(tl.make_model().to(device), mesh["tp"])
        for layer in model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = tl.batch(0, 4)
        rows = slice(mesh["dp"].get_local_rank() * 2, mesh["dp"].get_local_rank() * 2 + 2)
        x, y = x[rows].to(device), y[rows].to(device)

        def one():
            loss = tl.loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

        sync = torch.neuron.synchronize if device_type == "neuron" else (lambda: None)
        return timed(one, sync)

    t_neuron = step_time("neuron")
    t_cpu = step_time("cpu")
    if rank == 0:
        print(f"TP x FSDP tiny Llama step (TP=2 x FSDP=2): neuron {t_neuron * 1e3:.1f} ms, "
              f"CPU+Gloo {t_cpu * 1e3:.1f} ms, ratio {t_cpu / t_neuron:.2f}", flush=True)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-kib", type=int, default=4)
    parser.add_argument("--max-mib", type=int, default=256)
    parser.add_argument("--reps", type=int, default=12)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--skip-step", action="store_true", help="collectives only, no TP x FSDP step")
    parser.add_argument("--legacy-names", action="store_true",
                        help="call all_gather_into_tensor / reduce_scatter_tensor (deprecated in torch 2.13)")
    parser.add_argument("--pin", action="store_true",
                        help="pin rank r to core r %% cores (both backends run in the pinned ranks)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        sys.exit(launch(args))


if __name__ == "__main__":
    main()
