"""Every collective of the neuron backend against a CPU reference computed here from every rank's
inputs (each rank can build all ranks' inputs: they are deterministic functions of the rank).

Reductions: the transport combines ranks in rank order, 16-bit floats accumulated in float32 and
rounded once; the references below do the same on the CPU, so results must match exactly."""

import math
import os
import sys

import torch
import torch.distributed as dist

import torch_neuronx

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DEV = torch.device("neuron")

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8]
ALL = FLOATS + INTS + [torch.bool, torch.complex64]


def make(rank, dtype, n=37, salt=0):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dtype.is_complex:
        return torch.complex(torch.randn(n, generator=g), torch.randn(n, generator=g)).to(dtype)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g).to(dtype)
    hi = 7 if dtype in (torch.uint8, torch.int8) else 1000
    lo = 0 if dtype == torch.uint8 else -hi
    return torch.randint(lo, hi, (n,), generator=g).to(dtype)


def reference(dtype, op, n=37, salt=0, ranks=None):
    ranks = list(range(WORLD)) if ranks is None else ranks
    xs = [make(r, dtype, n, salt) for r in ranks]
    acc_dtype = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    if dtype == torch.bool:
        acc = xs[0].clone()
        for x in xs[1:]:
            if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.BOR):
                acc = acc | x
            elif op == dist.ReduceOp.BXOR:
                acc = acc ^ x
            else:
                acc = acc & x
        return acc
    acc = xs[0].to(acc_dtype)
    for x in xs[1:]:
        x = x.to(acc_dtype)
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG) or "PREMUL" in str(op):
            acc = acc + x
        elif op == dist.ReduceOp.PRODUCT:
            acc = acc * x
        elif op == dist.ReduceOp.MIN:
            acc = torch.minimum(acc, x)
        elif op == dist.ReduceOp.MAX:
            acc = torch.maximum(acc, x)
        elif op == dist.ReduceOp.BAND:
            acc = acc & x
        elif op == dist.ReduceOp.BOR:
            acc = acc | x
        elif op == dist.ReduceOp.BXOR:
            acc = acc ^ x
    return acc.to(dtype)


def same(got, want, what):
    got = got.cpu()
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError(f"rank {RANK}: {what}: got {got} expected {want}")


def ops_for(dtype):
    R = dist.ReduceOp
    if dtype == torch.bool:
        return [R.SUM, R.MIN, R.MAX, R.PRODUCT, R.BAND, R.BOR, R.BXOR]
    if dtype.is_complex:
        return [R.SUM, R.AVG]  # torch views complex as real pairs: only these are allowed
    if dtype.is_floating_point:
        return [R.SUM, R.AVG, R.MIN, R.MAX, R.PRODUCT, "premul"]
    return [R.SUM, R.MIN, R.MAX, R.PRODUCT, R.BAND, R.BOR, R.BXOR]


def check_allreduce_reduce():
    for dtype in ALL:
        for op in ops_for(dtype):
            x = make(RANK, dtype).to(DEV)
            if op == "premul":
                factor = 0.25
                dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
                want = reference(dtype, dist.ReduceOp.SUM).mul(factor)
            else:
                dist.all_reduce(x, op=op)
                want = reference(dtype, op)
                if op == dist.ReduceOp.AVG:
                    want = want.div(WORLD)
            same(x, want, f"all_reduce {dtype} {op}")
        # reduce to root 1: only the root's tensor changes
        x = make(RANK, dtype).to(DEV)
        op = dist.ReduceOp.SUM if dtype.is_complex else dist.ReduceOp.MAX
        dist.reduce(x, dst=1, op=op)
        same(x, reference(dtype, op) if RANK == 1 else make(RANK, dtype), f"reduce {dtype}")


def check_sizes_around_the_mapped_threshold():
    """Buffers from 64 KiB to 1 MiB, on both sides of where the transport switches from its
    slots to the peers' mapped device memory (all-reduce and reduce-scatter from 128 KiB of
    buffer, all-gather from 64 KiB per rank): the same bits on either path, so exact against the
    rank-order reference on every rank."""
    for n in (1 << 14, (1 << 15) + 3, 1 << 16, (1 << 18) + 5 * WORLD):
        for dtype in (torch.float32, torch.bfloat16):
            x = make(RANK, dtype, n, salt=7).to(DEV)
            dist.all_reduce(x)
            same(x, reference(dtype, dist.ReduceOp.SUM, n, salt=7), f"all_reduce {dtype} of {n}")
        part = n // WORLD
        flat = torch.empty(WORLD * part, device=DEV)
        dist.all_gather_into_tensor(flat, make(RANK, torch.float32, part, salt=8).to(DEV))
        want = torch.cat([make(r, torch.float32, part, salt=8) for r in range(WORLD)])
        same(flat, want, f"all_gather_into_tensor of {WORLD} x {part}")
        full = make(RANK, torch.float32, WORLD * part, salt=9).to(DEV)
        out = torch.empty(part, device=DEV)
        dist.reduce_scatter_tensor(out, full)
        want = reference(torch.float32, dist.ReduceOp.SUM, WORLD * part, salt=9)
        same(out, want[RANK * part : (RANK + 1) * part], f"reduce_scatter_tensor of {WORLD} x {part}")


def check_all_to_all():
    """Uneven all_to_all_single and list all_to_all: exact, every rank against every other
    (also used by the two-host worker)."""
    # uneven all_to_all_single: rank s sends s + d + 1 rows of 3 to rank d
    send_splits = [RANK + d + 1 for d in range(WORLD)]
    recv_splits = [s + RANK + 1 for s in range(WORLD)]
    rows = torch.arange(sum(send_splits) * 3, dtype=torch.float32).reshape(-1, 3) + 1000 * RANK
    out = torch.empty(sum(recv_splits), 3, device=DEV)
    dist.all_to_all_single(out, rows.to(DEV), recv_splits, send_splits)
    expected = []
    for s in range(WORLD):
        s_splits = [s + d + 1 for d in range(WORLD)]
        s_rows = torch.arange(sum(s_splits) * 3, dtype=torch.float32).reshape(-1, 3) + 1000 * s
        expected.append(s_rows.split(s_splits)[RANK])
    same(out, torch.cat(expected), "all_to_all_single uneven")
    ins = [torch.full((d + 1,), RANK * 10 + d, dtype=torch.int32, device=DEV) for d in range(WORLD)]
    outs = [torch.empty(RANK + 1, dtype=torch.int32, device=DEV) for _ in range(WORLD)]
    dist.all_to_all(outs, ins)
    for s in range(WORLD):
        same(outs[s], torch.full((RANK + 1,), s * 10 + RANK, dtype=torch.int32), "all_to_all")


def check_staged_tensors():
    """Non-contiguous neuron tensors are staged and written back; CPU tensors take the neuron group
    (it is registered for cpu too). Also used by the two-host worker."""
    m = (torch.arange(12.0).reshape(3, 4) * (RANK + 1)).to(DEV).t()
    dist.all_reduce(m)
    same(m, (torch.arange(12.0).reshape(3, 4) * sum(range(1, WORLD + 1))).t().contiguous(), "non-contiguous")
    c = torch.full((3,), float(RANK))
    dist.all_reduce(c)
    same(c, torch.full((3,), float(sum(range(WORLD)))), "cpu tensor all_reduce")


def check_movement():
    for dtype in ALL:
        x = make(RANK, dtype).to(DEV)
        dist.broadcast(x, src=2 % WORLD)
        same(x, make(2 % WORLD, dtype), f"broadcast {dtype}")
        outs = [torch.empty(37, dtype=dtype, device=DEV) for _ in range(WORLD)]
        dist.all_gather(outs, make(RANK, dtype).to(DEV))
        for r in range(WORLD):
            same(outs[r], make(r, dtype), f"all_gather {dtype} from {r}")
        flat = torch.empty(WORLD * 37, dtype=dtype, device=DEV)
        dist.all_gather_into_tensor(flat, make(RANK, dtype).to(DEV))
        same(flat, torch.cat([make(r, dtype) for r in range(WORLD)]), f"all_gather_into_tensor {dtype}")
    # reduce_scatter (list and tensor), float32 SUM and int64 MAX, bf16 AVG
    for dtype, op in [(torch.float32, dist.ReduceOp.SUM), (torch.int64, dist.ReduceOp.MAX),
                      (torch.bfloat16, dist.ReduceOp.AVG)]:
        n = 5 * WORLD
        full = make(RANK, dtype, n).to(DEV)
        out = torch.empty(5, dtype=dtype, device=DEV)
        dist.reduce_scatter_tensor(out, full, op=op)
        want = reference(dtype, op, n)
        if op == dist.ReduceOp.AVG:
            want = want.div(WORLD)
        same(out, want[5 * RANK : 5 * RANK + 5], f"reduce_scatter_tensor {dtype} {op}")
        out2 = torch.empty(5, dtype=dtype, device=DEV)
        dist.reduce_scatter(out2, list(full.chunk(WORLD)), op=op)
        same(out2, want[5 * RANK : 5 * RANK + 5], f"reduce_scatter {dtype} {op}")
    check_all_to_all()
    # gather / scatter at root 1
    g = [torch.empty(4, device=DEV) for _ in range(WORLD)] if RANK == 1 else None
    dist.gather(torch.full((4,), float(RANK), device=DEV), g, dst=1)
    if RANK == 1:
        for r in range(WORLD):
            same(g[r], torch.full((4,), float(r)), "gather")
    s_out = torch.empty(4, device=DEV)
    s_in = [torch.full((4,), 7.0 + r, device=DEV) for r in range(WORLD)] if RANK == 1 else None
    dist.scatter(s_out, s_in, src=1)
    same(s_out, torch.full((4,), 7.0 + RANK), "scatter")
    check_staged_tensors()


def check_coalesced_async_p2p_objects():
    a = torch.full((3,), float(RANK), device=DEV)
    b = torch.full((5,), 2.0 * RANK, device=DEV, dtype=torch.bfloat16)
    with dist._coalescing_manager(device=DEV, async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    total = float(sum(range(WORLD)))
    same(a, torch.full((3,), total), "coalesced all_reduce a")
    same(b, torch.full((5,), 2 * total, dtype=torch.bfloat16), "coalesced all_reduce b")
    outs = [torch.empty(WORLD * 2, device=DEV) for _ in range(2)]
    with dist._coalescing_manager(device=DEV, async_ops=True) as cm:
        for i in range(2):
            dist.all_gather_into_tensor(outs[i], torch.full((2,), float(RANK + i), device=DEV))
    cm.wait()
    same(outs[1], torch.arange(1.0, WORLD + 1).repeat_interleave(2), "coalesced all_gather_into_tensor")
    rs = [torch.empty(2, device=DEV) for _ in range(2)]
    with dist._coalescing_manager(device=DEV, async_ops=True) as cm:
        for i in range(2):
            dist.reduce_scatter_tensor(rs[i], torch.full((2 * WORLD,), float(i + 1), device=DEV))
    cm.wait()
    same(rs[1], torch.full((2,), 2.0 * WORLD), "coalesced reduce_scatter_tensor")
    # async work: the future carries the output tensors
    x = torch.full((4,), 1.0, device=DEV)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    value = work.get_future().value()
    same(value[0], torch.full((4,), float(WORLD)), "future value")
    # ring exchange with tensors larger than the 1 MiB pair ring, posted before anyone waits
    big = torch.arange(600_000, dtype=torch.float32) + RANK
    recv = torch.empty(600_000, device=DEV)
    ops = [
        dist.P2POp(dist.isend, big.to(DEV), (RANK + 1) % WORLD),
        dist.P2POp(dist.irecv, recv, (RANK - 1) % WORLD),
    ]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same(recv, torch.arange(600_000, dtype=torch.float32) + (RANK - 1) % WORLD, "batch_isend_irecv ring")
    if RANK == 0:
        dist.send(torch.tensor([3, 1, 4], device=DEV), dst=WORLD - 1, tag=5)
    elif RANK == WORLD - 1:
        t = torch.empty(3, dtype=torch.int64, device=DEV)
        dist.recv(t, src=0, tag=5)
        same(t, torch.tensor([3, 1, 4]), "send/recv")
    # object collectives (pickles as uint8 tensors on the group's device)
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": RANK, "name": "x" * RANK})
    assert objs == [{"rank": r, "name": "x" * r} for r in range(WORLD)], objs
    lst = [f"from {RANK}", RANK] if RANK == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == ["from 0", 0], lst
    gathered = [None] * WORLD if RANK == 0 else None
    dist.gather_object(("g", RANK), gathered, dst=0)
    if RANK == 0:
        assert gathered == [("g", r) for r in range(WORLD)], gathered
    got = [None]
    dist.scatter_object_list(got, [("s", r) for r in range(WORLD)] if RANK == 0 else None, src=0)
    assert got == [("s", RANK)], got
    if RANK == 0:
        dist.send_object_list([{"p2p": True}], dst=1)
    elif RANK == 1:
        o = [None]
        dist.recv_object_list(o, src=0)
        assert o == [{"p2p": True}], o


def check_subgroups():
    evens = dist.new_group([r for r in range(WORLD) if r % 2 == 0])
    odds = dist.new_group([r for r in range(WORLD) if r % 2 == 1])
    mine = evens if RANK % 2 == 0 else odds
    members = [r for r in range(WORLD) if r % 2 == RANK % 2]
    x = torch.full((2,), float(RANK), device=DEV)
    dist.all_reduce(x, group=mine)
    same(x, torch.full((2,), float(sum(members))), "new_group all_reduce")
    dist.barrier(group=mine)
    # A group that only some ranks belong to, made before the split: torch names the split's
    # store prefix from how many groups each process knows, which now differs between ranks.
    ends = dist.new_group([0, WORLD - 1])
    if RANK in (0, WORLD - 1):
        dist.barrier(group=ends)
    split = dist.split_group(split_ranks=[[0, 1], list(range(2, WORLD))])
    # One child per split: torch 2.13 asks the backend once per device type (cpu, neuron) and
    # keeps the first; a second child's rendezvous (under the next generation of the rank list's
    # keys) would be built and dropped at once, racing slower members (see ProcessGroupNeuron.h).
    mine = ",".join(str(r) for r in ([0, 1] if RANK < 2 else range(2, WORLD))) + ","
    _, world_store = dist.distributed_c10d._world.pg_map[dist.group.WORLD]
    made = [world_store.check([f"neuron//nrtsim-split/{mine}/{g}/nrtsim/host/0"]) for g in (0, 1)]
    assert made == [True, False], f"split children made (generations 0, 1): {made}"
    y = torch.full((1,), float(RANK), device=DEV)
    dist.all_reduce(y, group=split)
    peers = [0, 1] if RANK < 2 else list(range(2, WORLD))
    same(y, torch.full((1,), float(sum(peers))), "split_group all_reduce")


def check_launch_records_and_errors():
    torch_neuronx.clear_kernel_trace()
    before = torch_neuronx.simulated_time()["now_ns"]
    x = torch.ones(1 << 16, device=DEV)
    dist.all_reduce(x)
    rec = [r for r in torch_neuronx.kernel_trace() if r["op"] == "c10d::allreduce"]
    assert len(rec) == 1 and rec[0]["kind"] == "collective" and rec[0]["launches"] == 1, rec
    moved = 2 * (WORLD - 1) * x.numel() * 4 // WORLD
    assert rec[0]["bytes_read"] == moved and rec[0]["bytes_written"] == moved, rec
    assert torch_neuronx.simulated_time()["now_ns"] > before
    # Modelled time (the runtime's link model, torch_neuronx/data/neuron_links.ini): the launch's
    # fixed cost, the larger direction over the core's share of its links, one hop latency per
    # step of the ring's two passes. Ranks of one chip exchange through HBM (each byte read and
    # written); a group over several chips crosses NeuronLink with the algorithm picked by size.
    core = torch_neuronx.core_model()
    links = torch_neuronx.core_links()
    chips = -(-WORLD // links["cores_per_chip"])
    buffer = x.numel() * 4
    if chips == 1:
        steps, rate = WORLD - 1, core["hbm_bytes_per_ns"] / 2
    else:
        steps = (2 if buffer < links["mesh_below_bytes"] else
                 1 + math.ceil(math.log2(chips)) if buffer < links["rdh_below_bytes"] else WORLD - 1)
        rate = links["link_bytes_per_ns"]
    expected_ns = core["kernel_launch_ns"] + moved / rate + 2 * steps * links["hop_latency_ns"]
    assert abs(rec[0]["sim_ns"] - expected_ns) <= 1e-9 * expected_ns, (rec[0]["sim_ns"], expected_ns)
    # The profiler shows the collective as one device event on the rank's core.
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        dist.all_reduce(x)
    device_events = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1 and e.name == "c10d::allreduce [dma]"]
    assert len(device_events) == 1, [e.name for e in prof.events()]
    # A size mismatch fails on every rank with a message naming each rank's call ...
    bad = torch.ones(4 + (RANK == 1), device=DEV)
    try:
        dist.all_reduce(bad)
    except dist.DistBackendError as e:
        assert "rank 1: allreduce of 5 float32 elements" in str(e), str(e)
    else:
        raise AssertionError("mismatched sizes did not raise")
    # ... and so does a dtype mismatch; the group stays usable.
    mixed = torch.ones(4, device=DEV, dtype=torch.float32 if RANK else torch.bfloat16)
    try:
        dist.all_reduce(mixed)
    except dist.DistBackendError as e:
        assert "bfloat16" in str(e) and "float32" in str(e), str(e)
    else:
        raise AssertionError("mismatched dtypes did not raise")
    ok = torch.ones(2, device=DEV)
    dist.all_reduce(ok)
    same(ok, torch.full((2,), float(WORLD)), "after errors")
    try:
        dist.all_reduce(torch.ones(2, device=DEV), op=dist.ReduceOp.BXOR)
    except dist.DistBackendError as e:
        assert "BXOR is not defined for float32" in str(e), str(e)
    else:
        raise AssertionError("BXOR on float did not raise")


def main():
    # device_id binds the group to this process's core (split_group needs it).
    dist.init_process_group("neuron", device_id=torch.device("neuron", 0))
    assert dist.get_backend() == "neuron"
    check_allreduce_reduce()
    check_movement()
    check_sizes_around_the_mapped_threshold()
    check_coalesced_async_p2p_objects()
    check_subgroups()
    check_launch_records_and_errors()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {RANK} ok")


if __name__ == "__main__":
    main()
    sys.exit(0)
