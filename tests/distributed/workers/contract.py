"""TorchNeuron's collective contract, the forms its own tests use, at 4 ranks: each checked against
a CPU reference built here from every rank's inputs (they are deterministic functions of the rank).

argv[1:]: scenarios, in order (see test_contract.py)."""

import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DEV = torch.device("neuron")
R = dist.ReduceOp


def same(got, want, what):
    got = got.cpu()
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError(f"rank {RANK}: {what}: got {got} expected {want}")


def value(rank, shape, dtype, salt=0):
    g = torch.Generator().manual_seed(100 * rank + salt)
    x = torch.randint(-20, 21, shape, generator=g)
    return x.to(dtype) if dtype != torch.uint8 else x.abs().to(dtype)


def combine(xs, op):
    acc = xs[0].clone()
    for x in xs[1:]:
        acc = {R.SUM: torch.add, R.AVG: torch.add, R.MIN: torch.minimum, R.MAX: torch.maximum}[op](acc, x)
    if op == R.AVG:
        acc = acc / WORLD if acc.is_floating_point() else torch.div(acc, WORLD, rounding_mode="trunc")
    return acc


def invalid_roots():
    """Roots outside the group raise as Gloo's ("invalid root rank"), before anything moves; the
    group stays usable."""
    x = torch.full((8,), float(RANK + 1), device=DEV)
    calls = {
        "broadcast src=999": lambda: dist.broadcast(x, src=999),
        "broadcast src=WORLD": lambda: dist.broadcast(x, src=WORLD),
        "reduce dst=WORLD": lambda: dist.reduce(x, dst=WORLD),
        "gather dst=WORLD": lambda: dist.gather(x, None, dst=WORLD),
        "scatter src=WORLD": lambda: dist.scatter(x, None, src=WORLD),
    }
    for what, call in calls.items():
        try:
            call()
        except (RuntimeError, ValueError) as e:
            # torch checks some roots in Python first ("... is not part of group"); what reaches the
            # backend must be refused by it, never crash or return.
            message = str(e)
            assert "invalid root rank" in message or "not part of group" in message or "not in group" in message, (
                what, message)
        else:
            raise AssertionError(f"rank {RANK}: {what} returned")
        same(x, torch.full((8,), float(RANK + 1)), f"{what} left the tensor as it was")
    # The backend's own check, reached without torch's Python (the group object's method).
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.BroadcastOptions()
    opts.rootRank = 999
    try:
        pg.broadcast([x], opts)
    except RuntimeError as e:
        assert "invalid root rank: 999" in str(e), str(e)
    else:
        raise AssertionError("pg.broadcast(root 999) returned")
    dist.all_reduce(x)
    same(x, torch.full((8,), float(sum(range(1, WORLD + 1)))), "all_reduce after refused roots")
    print(f"rank {RANK} invalid roots ok", flush=True)


def reduce_scatter_one_tensor():
    """reduce_scatter(output, [input]): the one tensor is the whole input, scattered along the
    dimension that is the group size times the output's (TorchNeuron's form)."""
    cases = [((4 * WORLD,), 0), ((2 * WORLD, 3), 0), ((2, 4 * WORLD, 3), 1), ((2, 3, WORLD), 2), ((1, 2 * WORLD), 1)]
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        for shape, dim in cases:
            for op in (R.SUM, R.AVG, R.MIN, R.MAX):
                inp = value(RANK, shape, dtype)
                out_shape = list(shape)
                out_shape[dim] //= WORLD
                out = torch.empty(out_shape, dtype=dtype, device=DEV)
                dist.reduce_scatter(out, [inp.to(DEV)], op=op)
                whole = combine([value(r, shape, dtype).float() if dtype == torch.bfloat16 else value(r, shape, dtype)
                                 for r in range(WORLD)], op)
                want = whole.chunk(WORLD, dim)[RANK].to(dtype)
                same(out, want, f"reduce_scatter one tensor {shape} dim {dim} {dtype} {op}")
    # A shape that is no group-size multiple of the output along one dimension is refused.
    try:
        dist.reduce_scatter(torch.empty(3, device=DEV), [torch.ones(8, device=DEV)])
    except dist.DistBackendError as e:
        assert "group size" in str(e), str(e)
    else:
        raise AssertionError("reduce_scatter of 8 onto 3 elements returned")
    print(f"rank {RANK} reduce_scatter one tensor ok", flush=True)


def avg_integers():
    """ReduceOp.AVG on integer tensors: the sum divided by the group size, truncated toward zero
    (as NCCL, and TorchNeuron's tests expect); on bool: refused (TypeError, as NCCL)."""
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        x = value(RANK, (33,), dtype).to(DEV)
        dist.all_reduce(x, op=R.AVG)
        want = combine([value(r, (33,), dtype).to(torch.int64) for r in range(WORLD)], R.AVG).to(dtype)
        same(x, want, f"all_reduce AVG {dtype}")
        y = value(RANK, (33,), dtype, salt=1).to(DEV)
        dist.reduce(y, dst=2, op=R.AVG)
        want = combine([value(r, (33,), dtype, salt=1).to(torch.int64) for r in range(WORLD)], R.AVG).to(dtype)
        same(y, want if RANK == 2 else value(RANK, (33,), dtype, salt=1), f"reduce AVG {dtype}")
    one = torch.tensor([RANK + 1], dtype=torch.int32, device=DEV)  # (1 + 2 + 3 + 4) / 4 = 2.5 -> 2
    dist.all_reduce(one, op=R.AVG)
    same(one, torch.tensor([sum(range(1, WORLD + 1)) // WORLD], dtype=torch.int32), "AVG truncates")
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.bool, device=DEV), op=R.AVG)
    except TypeError as e:
        assert "boolean" in str(e), str(e)
    else:
        raise AssertionError("AVG on bool returned")
    print(f"rank {RANK} avg integers ok", flush=True)


def works():
    """Work.get_sequence_number (increasing, as TorchNeuron's and NCCL's) and get_duration (the
    simulated time of the collective's launch); pg.name() answers "neuron"."""
    tensors = [torch.ones(1024, device=DEV) for _ in range(3)]
    ws = [dist.all_reduce(t, async_op=True) for t in tensors]
    seqs = [w.get_sequence_number() for w in ws]
    assert seqs[0] < seqs[1] < seqs[2], seqs
    for w in ws:
        w.wait()
        assert w._get_duration() > 0, w._get_duration()
    s = dist.isend(torch.ones(4, device=DEV), (RANK + 1) % WORLD)
    r = dist.irecv(torch.empty(4, device=DEV), (RANK - 1) % WORLD)
    assert r.get_sequence_number() > s.get_sequence_number() > seqs[2]
    s.wait()
    r.wait()
    pg = dist.distributed_c10d._get_default_group()
    assert pg.name() == "neuron", pg.name()
    sub = dist.new_group([0, 1], backend="neuron")
    if RANK in (0, 1):
        assert sub.name() == "neuron", sub.name()
    gloo = dist.new_group(backend="gloo")
    assert gloo.name() == "gloo", gloo.name()
    print(f"rank {RANK} works ok", flush=True)


def ddp_timing():
    """DDP's runtime statistics come from the device's timer (the test checks that no rank printed
    "Time stats are currently only collected for CPU and CUDA devices"), and the logged times are
    the simulated ones."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(DEV))
    warnings.simplefilter("always")  # a warning would show on every occurrence
    for _ in range(12):  # DDP samples its statistics at some iterations
        model(torch.randn(16, 64).to(DEV)).sum().backward()
    data = model._get_ddp_logging_data()
    assert data.get("avg_forward_compute_time", 0) > 0, data
    assert data.get("avg_backward_compute_time", 0) > 0, data
    print(f"rank {RANK} ddp timing ok", flush=True)


def store_host_leaves():
    """Rank 0 hosts the c10d store (init from MASTER_ADDR/PORT) and is not in a group of the
    others. Once the members have created it, it exits: the members' group never needs the store
    again."""
    members = list(range(1, WORLD))
    group = dist.new_group(members, backend="neuron")
    marker = os.environ["CONTRACT_MARKER_DIR"]
    if RANK == 0:
        # Wait for every member to have its group, then leave (ending the store with it).
        while len(os.listdir(marker)) < len(members):
            time.sleep(0.05)
        print(f"rank {RANK} store host leaves", flush=True)
        os._exit(0)
    open(os.path.join(marker, str(RANK)), "w").close()
    time.sleep(2)  # rank 0 is gone by now (the test checks that it left first)
    x = torch.full((100_000,), float(RANK), device=DEV)
    for _ in range(3):
        dist.all_reduce(x, group=group)
        dist.barrier(group=group)
    got = torch.empty(1, device=DEV)
    if RANK == 1:
        dist.send(torch.full((1,), 7.0, device=DEV), 2)
    elif RANK == 2:
        dist.recv(got, 1)
        same(got, torch.full((1,), 7.0), "send/recv after the store host left")
    total = float(sum(members))
    same(x[:3], torch.full((3,), total * len(members) ** 2), "all_reduce after the store host left")
    dist.destroy_process_group(group)
    print(f"rank {RANK} store host left ok", flush=True)
    os._exit(0)


SCENARIOS = {
    "invalid_roots": invalid_roots,
    "reduce_scatter_one_tensor": reduce_scatter_one_tensor,
    "avg_integers": avg_integers,
    "works": works,
    "ddp_timing": ddp_timing,
    "store_host_leaves": store_host_leaves,
}


def main():
    dist.init_process_group("neuron")
    for scenario in sys.argv[1:]:
        SCENARIOS[scenario]()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {RANK} done", flush=True)


if __name__ == "__main__":
    main()
