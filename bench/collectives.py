"""Collective bandwidth of the "neuron" process group against Gloo, side by side in one run.

Starts 4 ranks (one process per NeuronCore, as torchrun would) on this host. For all_reduce,
all_gather_into_tensor and reduce_scatter_tensor from 4 KiB to 256 MiB, every rank times the same
operation on neuron tensors over the neuron group and on CPU tensors of the same size and contents
over a Gloo group; the slowest rank's time counts, the median of the repetitions is reported as
bus bandwidth (NCCL-tests convention: size x 2(n-1)/n for all_reduce, size x (n-1)/n for the
others, where size is the largest buffer). The limit is this host's memcpy bandwidth, measured
here. Last, the TP x FSDP training step of the tiny Llama (TP=2 x FSDP=2) on neuron vs the same
step on CPU with Gloo.

    python bench/collectives.py [--max-mib 256] [--reps 5] [--ranks 4]
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


def memcpy_gbps(nbytes: int, reps: int) -> float:
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty_like(src)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t)
    return nbytes / statistics.median(times) / 1e9


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    import torch_neuronx  # noqa: F401

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Both backends in one world: neuron tensors go to "neuron", CPU tensors to Gloo.
    dist.init_process_group("cpu:gloo,neuron:neuron")
    neuron = dist.new_group(backend="neuron")
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

    rows = []
    size = 4 << 10
    while size <= args.max_mib << 20:
        n = size // 4
        for op in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"):
            results = {}
            for name, group, device in (("neuron", neuron, dev), ("gloo", gloo, torch.device("cpu"))):
                if op == "all_reduce":
                    x = torch.ones(n, device=device)
                    fn = lambda x=x, g=group: dist.all_reduce(x, group=g)  # noqa: E731
                    factor = 2 * (world - 1) / world
                elif op == "all_gather_into_tensor":
                    out = torch.empty(n, device=device)
                    inp = torch.ones(n // world, device=device)
                    fn = lambda o=out, i=inp, g=group: dist.all_gather_into_tensor(o, i, group=g)  # noqa: E731
                    factor = (world - 1) / world
                else:
                    out = torch.empty(n // world, device=device)
                    inp = torch.ones(n, device=device)
                    fn = lambda o=out, i=inp, g=group: dist.reduce_scatter_tensor(o, i, group=g)  # noqa: E731
                    factor = (world - 1) / world
                sync = torch.neuron.synchronize if device.type == "neuron" else (lambda: None)
                t = timed(fn, sync)
                results[name] = (t, size * factor / t / 1e9)
            rows.append((op, size, results))
            if rank == 0:
                (tn, bn), (tg, bg) = results["neuron"], results["gloo"]
                print(f"{op:24s} {size / 1024:>10.0f} KiB  neuron {tn * 1e6:9.1f} us {bn:7.2f} GB/s   "
                      f"gloo {tg * 1e6:9.1f} us {bg:7.2f} GB/s   x{tg / tn:5.2f}", flush=True)
        size *= 4

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
        print(f"host memcpy bandwidth (256 MiB, 1 thread): {memcpy_gbps(256 << 20, args.reps):.2f} GB/s", flush=True)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-mib", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        sys.exit(launch(args))


if __name__ == "__main__":
    main()
