"""The neuron process group across hosts: hierarchical collectives (shared memory within a host,
Gloo between host leaders), checked against expected values, then scenarios from parallel.py.

Runs under torchrun in two network namespaces (test_two_hosts.py), or as plain processes told
their host by NRTSIM_HOST_ID. argv[1:]: scenarios in order: collectives | records | ddp | fsdp2 |
mismatch (last) | sigkill:<rank> (that rank kills itself in an allreduce; every other rank must raise within the
group's timeout; FAULT_TIMEOUT_S).

Inputs are chosen so that every result is exact whatever the order of combination (values in
{-3, -2, -1, -1/2, 1/2, 1, 2, 3}: sums, products, means of 4 such values are exact in every float
type; with more ranks, powers of two only; integers wrap the same way in any order), so the expected values are computed here in
float64 / int64 and converted: any difference is a wrong byte, not a rounding.
"""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_neuronx

sys.path.insert(0, os.path.dirname(__file__))
from collectives import check_all_to_all, check_staged_tensors  # noqa: E402

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DEV = torch.device("neuron")
N = 37
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int16, torch.uint8, torch.bool,
          torch.complex64]
R = dist.ReduceOp


def make(rank, dtype, n=N, salt=0):
    g = torch.Generator().manual_seed(7919 * rank + salt)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    # Products of more than 4 of them stay exact only with powers of two (many_hosts.py: 16 ranks).
    values = torch.tensor([-3.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0] if WORLD <= 4 else
                          [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0, -1.0, 1.0])
    if dtype.is_complex:
        re, im = values[torch.randint(0, 8, (n,), generator=g)], values[torch.randint(0, 8, (n,), generator=g)]
        return torch.complex(re, im).to(dtype)
    if dtype.is_floating_point:
        return values[torch.randint(0, 8, (n,), generator=g)].to(dtype)
    lo = 0 if dtype == torch.uint8 else -9
    return torch.randint(lo, 10, (n,), generator=g).to(dtype)


def expected(dtype, op, n=N, salt=0):
    xs = [make(r, dtype, n, salt) for r in range(WORLD)]
    if dtype == torch.bool:
        acc = xs[0].clone()
        for x in xs[1:]:
            if op in (R.SUM, R.MAX, R.BOR):
                acc = acc | x
            elif op == R.BXOR:
                acc = acc ^ x
            else:
                acc = acc & x
        return acc
    wide = torch.complex128 if dtype.is_complex else torch.float64 if dtype.is_floating_point else torch.int64
    acc = xs[0].to(wide)
    for x in xs[1:]:
        x = x.to(wide)
        if op in (R.SUM, R.AVG, "premul"):
            acc = acc + x
        elif op == R.PRODUCT:
            acc = acc * x
        elif op == R.MIN:
            acc = torch.minimum(acc, x)
        elif op == R.MAX:
            acc = torch.maximum(acc, x)
        elif op == R.BAND:
            acc = acc & x
        elif op == R.BOR:
            acc = acc | x
        elif op == R.BXOR:
            acc = acc ^ x
    if op == R.AVG:
        acc = acc / WORLD
    if op == "premul":
        acc = acc * 0.25
    return acc.to(dtype)  # integers wrap as the narrow type's arithmetic does


def same(got, want, what):
    got = got.cpu()
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError(f"rank {RANK}: {what}: got {got} expected {want}")


def ops_for(dtype):
    if dtype == torch.bool:
        return [R.SUM, R.MIN, R.PRODUCT, R.BXOR]
    if dtype.is_complex:
        return [R.SUM, R.AVG]
    if dtype.is_floating_point:
        return [R.SUM, R.AVG, R.MIN, R.MAX, R.PRODUCT, "premul"]
    return [R.SUM, R.MAX, R.PRODUCT, R.BAND, R.BXOR]


def check_collectives():
    for dtype in DTYPES:
        for op in ops_for(dtype):
            x = make(RANK, dtype).to(DEV)
            dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.25) if op == "premul" else op)
            same(x, expected(dtype, op), f"all_reduce {dtype} {op}")
        for root in (1, WORLD - 1):  # a non-leader root on host 0 and one on the last host
            op = R.SUM if dtype.is_complex else R.MAX
            x = make(RANK, dtype, salt=1).to(DEV)
            dist.reduce(x, dst=root, op=op)
            same(x, expected(dtype, op, salt=1) if RANK == root else make(RANK, dtype, salt=1), f"reduce {dtype} to {root}")
            b = make(RANK, dtype, salt=2).to(DEV)
            dist.broadcast(b, src=root)
            same(b, make(root, dtype, salt=2), f"broadcast {dtype} from {root}")
        outs = [torch.empty(N, dtype=dtype, device=DEV) for _ in range(WORLD)]
        dist.all_gather(outs, make(RANK, dtype).to(DEV))
        for r in range(WORLD):
            same(outs[r], make(r, dtype), f"all_gather {dtype} from {r}")
        flat = torch.empty(WORLD * N, dtype=dtype, device=DEV)
        dist.all_gather_into_tensor(flat, make(RANK, dtype).to(DEV))
        same(flat, torch.cat([make(r, dtype) for r in range(WORLD)]), f"all_gather_into_tensor {dtype}")
        if dtype != torch.bool:
            op = R.SUM if dtype.is_complex or dtype.is_floating_point else R.BXOR
            full = make(RANK, dtype, 5 * WORLD, salt=3).to(DEV)
            want = expected(dtype, op, 5 * WORLD, salt=3)[5 * RANK : 5 * RANK + 5]
            out = torch.empty(5, dtype=dtype, device=DEV)
            dist.reduce_scatter_tensor(out, full, op=op)
            same(out, want, f"reduce_scatter_tensor {dtype} {op}")
            out2 = torch.empty(5, dtype=dtype, device=DEV)
            dist.reduce_scatter(out2, list(full.chunk(WORLD)), op=op)
            same(out2, want, f"reduce_scatter {dtype} {op}")
    check_all_to_all()
    root = WORLD - 1
    g = [torch.empty(4, dtype=torch.bfloat16, device=DEV) for _ in range(WORLD)] if RANK == root else None
    dist.gather(torch.full((4,), float(RANK), dtype=torch.bfloat16, device=DEV), g, dst=root)
    if RANK == root:
        for r in range(WORLD):
            same(g[r], torch.full((4,), float(r), dtype=torch.bfloat16), "gather")
    s_out = torch.empty(4, dtype=torch.int64, device=DEV)
    s_in = [torch.full((4,), 7 + r, device=DEV) for r in range(WORLD)] if RANK == 0 else None
    dist.scatter(s_out, s_in, src=0)
    same(s_out, torch.full((4,), 7 + RANK), "scatter")
    # point to point: a ring (crossing hosts at its ends), batched, larger than Gloo's and the
    # shared-memory ring's buffers
    big = torch.arange(300_000, dtype=torch.float32) + RANK
    recv = torch.empty(300_000, device=DEV)
    ops = [dist.P2POp(dist.isend, big.to(DEV), (RANK + 1) % WORLD), dist.P2POp(dist.irecv, recv, (RANK - 1) % WORLD)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same(recv, torch.arange(300_000, dtype=torch.float32) + (RANK - 1) % WORLD, "batch_isend_irecv ring")
    # non-contiguous tensors, CPU tensors, a barrier
    check_staged_tensors()
    dist.barrier()
    # object collectives
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": RANK, "name": "x" * RANK})
    assert objs == [{"rank": r, "name": "x" * r} for r in range(WORLD)], objs
    lst = [f"from {root}", root] if RANK == root else [None, None]
    dist.broadcast_object_list(lst, src=root)
    assert lst == [f"from {root}", root], lst
    gathered = [None] * WORLD if RANK == 0 else None
    dist.gather_object(("g", RANK), gathered, dst=0)
    if RANK == 0:
        assert gathered == [("g", r) for r in range(WORLD)], gathered
    got = [None]
    dist.scatter_object_list(got, [("s", r) for r in range(WORLD)] if RANK == root else None, src=root)
    assert got == [("s", RANK)], got
    if RANK == 0:
        dist.send_object_list([{"p2p": True}], dst=root)
    elif RANK == root:
        o = [None]
        dist.recv_object_list(o, src=0)
        assert o == [{"p2p": True}], o
    # subgroups: the split into halves, and one spanning hosts with one rank per host
    halves = dist.split_group(split_ranks=[list(range(WORLD // 2)), list(range(WORLD // 2, WORLD))])
    z = torch.full((1,), float(RANK), device=DEV)
    dist.all_reduce(z, group=halves)
    peers = range(WORLD // 2) if RANK < WORLD // 2 else range(WORLD // 2, WORLD)
    same(z, torch.full((1,), float(sum(peers))), "split_group all_reduce")
    pair = [0, WORLD - 1]
    sub = dist.new_group(pair)
    if RANK in pair:
        y = torch.full((2,), float(RANK + 1), device=DEV)
        dist.all_reduce(y, group=sub)
        same(y, torch.full((2,), float(sum(r + 1 for r in pair))), "spanning new_group all_reduce")
    print(f"rank {RANK} two-host collectives ok", flush=True)


def check_records(local_size, hosts):
    """One launch record per collective; its time (the runtime's link model, neuron_links.ini):
    the launch, the host leg (through HBM for ranks of one chip, NeuronLink otherwise) with a hop
    latency per ring step, and this core's share of the inter-host leg over EFA with one EFA hop
    latency per step of the ring over the hosts."""
    torch_neuronx.clear_kernel_trace()
    x = torch.ones(1 << 14, device=DEV)
    dist.all_reduce(x)
    same(x, torch.full((1 << 14,), float(WORLD)), "records all_reduce")
    rec = [r for r in torch_neuronx.kernel_trace() if r["op"] == "c10d::allreduce"]
    assert len(rec) == 1 and rec[0]["kind"] == "collective" and rec[0]["launches"] == 1, rec
    b = x.numel() * 4
    nl = 2 * (local_size - 1) * b // local_size
    # This core's shard's share held by the other hosts' ranks: 2 (H-1)/H of it for hosts of L
    # ranks each, (N-L)/N of it on hosts of unequal sizes.
    efa = 2 * (b // local_size) * (WORLD - local_size) // WORLD
    assert rec[0]["bytes_read"] == nl + efa and rec[0]["bytes_written"] == nl + efa, (rec, nl, efa)
    core = torch_neuronx.core_model()
    links = torch_neuronx.core_links()
    want = core["kernel_launch_ns"]
    if local_size > 1:
        chips = -(-local_size // links["cores_per_chip"])
        assert chips == 1 or b < links["mesh_below_bytes"], "the test assumes one chip or a mesh"
        steps = local_size - 1 if chips == 1 else 2
        rate = core["hbm_bytes_per_ns"] / 2 if chips == 1 else links["link_bytes_per_ns"]
        want += nl / rate + 2 * steps * links["hop_latency_ns"]
    want += efa / links["efa_bytes_per_ns"] + 2 * (hosts - 1) * links["efa_hop_latency_ns"]
    assert abs(rec[0]["sim_ns"] - want) <= 1e-9 * want, (rec[0]["sim_ns"], want)
    # An all-gather of 4 KiB parts: this core's rail brings it its 1/L share of the other hosts'
    # parts over EFA; everything else it ends with comes over NeuronLink (the other hosts' parts
    # that its host's other cores carried included): (L-1)/L of the whole output. A
    # reduce-scatter sends what an all-gather receives.
    part = torch.ones(1 << 10, device=DEV)
    whole = torch.empty(WORLD << 10, device=DEV)
    for op, run in (("c10d::_allgather_base", lambda: dist.all_gather_into_tensor(whole, part)),
                    ("c10d::_reduce_scatter_base", lambda: dist.reduce_scatter_tensor(part, whole))):
        torch_neuronx.clear_kernel_trace()
        run()
        rec = [r for r in torch_neuronx.kernel_trace() if r["kind"] == "collective"]
        assert len(rec) == 1, rec
        b = whole.numel() * 4
        nl = (local_size - 1) * b // local_size
        efa = (b // local_size) * (WORLD - local_size) // WORLD
        assert 4096 + nl + efa == b, (nl, efa, b)  # every part once
        assert rec[0]["bytes_read"] == nl + efa and rec[0]["bytes_written"] == nl + efa, (op, rec, nl, efa)
    print(f"rank {RANK} two-host records ok", flush=True)


def sigkill(victim, timeout):
    x = torch.ones(1000, device=DEV)
    dist.all_reduce(x)  # everyone is up
    print(f"rank {RANK} pid {os.getpid()} ready", flush=True)
    dist.barrier()
    if RANK == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(x)
    except dist.DistBackendError as e:
        elapsed = time.monotonic() - start
        print(f"rank {RANK} raised after {elapsed:.2f} s: {str(e)[:400]}", flush=True)
        assert elapsed < timeout.total_seconds(), elapsed
        # The group is aborted: later calls fail at once.
        start = time.monotonic()
        try:
            dist.all_reduce(x)
        except dist.DistBackendError:
            assert time.monotonic() - start < 5
        else:
            raise AssertionError("a call after the failure succeeded")
        os._exit(0)  # the peers are gone: no collective teardown
    raise AssertionError(f"rank {RANK}: no error after rank {victim} was killed")


def mismatch():
    """The last rank's host calls all_reduce with 5 elements, the others with 4: every rank raises,
    naming the hosts' calls (a mismatch across hosts aborts the group: later calls fail at once)."""
    x = torch.ones(4 + (RANK == WORLD - 1), device=DEV)
    try:
        dist.all_reduce(x)
    except dist.DistBackendError as e:
        message = str(e)
        print(f"rank {RANK} mismatch raised: {message[:300]}", flush=True)
        assert "different collectives or sizes" in message or "aborted" in message or "elements" in message, message
    else:
        raise AssertionError(f"rank {RANK}: a size mismatch across hosts did not raise")
    try:
        dist.all_reduce(torch.ones(4, device=DEV))
    except dist.DistBackendError:
        pass
    else:
        raise AssertionError(f"rank {RANK}: the group was still usable after the mismatch")
    print(f"rank {RANK} two-host mismatch ok", flush=True)
    os._exit(0)


def main():
    timeout = timedelta(seconds=float(os.environ.get("FAULT_TIMEOUT_S", "60")))
    dist.init_process_group("neuron", device_id=torch.device("neuron", 0), timeout=timeout)
    local_size = int(os.environ.get("TWO_HOSTS_LOCAL", "2"))
    hosts = int(os.environ.get("TWO_HOSTS_HOSTS", "2"))
    for scenario in sys.argv[1:]:
        if scenario == "collectives":
            check_collectives()
        elif scenario == "records":
            check_records(local_size, hosts)
        elif scenario in ("ddp", "fsdp2"):
            import parallel

            parallel.run(scenario, parallel.reference())
        elif scenario == "mismatch":
            mismatch()
        elif scenario.startswith("sigkill:"):
            sigkill(int(scenario.split(":")[1]), timeout)
        else:
            raise SystemExit(f"unknown scenario {scenario}")
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {RANK} done", flush=True)


if __name__ == "__main__":
    main()
