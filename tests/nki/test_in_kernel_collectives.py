"""nki.collectives: in-kernel collectives between the ranks of a torch.distributed job (the
"neuron" backend), at 2 and 4 ranks, every form against a NumPy reference built from all ranks'
inputs or against the torch.distributed collective itself (same bits), HBM and SBUF where the
stub allows them; and the refusals (no process group, a rank outside the group, mismatched
shapes, mixed memories).

The ranks run this file as a script (``main`` below), started the way torchrun starts them
(tests/distributed/launcher.py); the pytest functions at the end start them and check exit codes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from nki.collectives import ReplicaGroup

# ---------------------------------------------------------------------------------------------
# kernels (every rank runs the same one)


@nki.jit
def all_reduce_hbm(x, group, op):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=op)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def copies_only(x):
    # all_reduce_hbm without its collective: the timing test's baseline.
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    nisa.dma_copy(dst=out, src=src)
    return out


@nki.jit
def all_reduce_sbuf(x, group):
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=a, src=x)
    ncc.all_reduce(srcs=[a], dsts=[b], replica_group=group, op=nl.maximum)
    nisa.dma_copy(dst=out, src=b)
    return out


@nki.jit
def all_reduce_coalesced(x, y, group):
    # Two tensors of different shapes and dtypes in one call.
    outs = []
    srcs, dsts = [], []
    for t in (x, y):
        s = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        d = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=s, src=t)
        srcs.append(s)
        dsts.append(d)
    ncc.all_reduce(srcs=srcs, dsts=dsts, replica_group=group, op=nl.add)
    for t, d in zip((x, y), dsts):
        o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        outs.append(o)
    return tuple(outs)


@nki.jit
def all_gather_hbm(x, group, n):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray((x.shape[0] * n, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(dst.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_gather(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def all_gather_sbuf(x, group, n, dim):
    p, f = x.shape
    shape = (p * n, f) if dim == 0 else (p, f * n)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray(shape, dtype=x.dtype, buffer=nl.sbuf)
    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=a, src=x)
    ncc.all_gather(srcs=[a], dsts=[b], replica_group=group, collective_dim=dim)
    nisa.dma_copy(dst=out, src=b)
    return out


@nki.jit
def all_gather_coalesced(x, y, group, n):
    srcs, dsts, outs = [], [], []
    for t in (x, y):
        s = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=s, src=t)
        srcs.append(s)
        dsts.append(nl.ndarray((t.shape[0] * n,) + tuple(t.shape[1:]), dtype=t.dtype,
                               buffer=nl.shared_hbm))
    ncc.all_gather(srcs=srcs, dsts=dsts, replica_group=group, collective_dim=0)
    for d in dsts:
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        outs.append(o)
    return tuple(outs)


@nki.jit
def reduce_scatter_hbm(x, group, n):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray((x.shape[0] // n, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(dst.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.reduce_scatter(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0, op=nl.add)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def reduce_scatter_sbuf(x, group, n):
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray((x.shape[0] // n, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    out = nl.ndarray(b.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=a, src=x)
    ncc.reduce_scatter(srcs=[a], dsts=[b], replica_group=group, collective_dim=0, op=nl.minimum)
    nisa.dma_copy(dst=out, src=b)
    return out


@nki.jit
def all_to_all_hbm(x, group):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_to_all(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def all_to_all_v_hbm(x, meta, group, has_rdispls):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray(meta.shape, dtype=meta.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    meta_out = nl.ndarray(meta.shape, dtype=meta.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    nisa.dma_copy(dst=m, src=meta)
    nisa.dma_copy(dst=dst, src=x)  # what no chunk lands on keeps this
    ncc.all_to_all_v(srcs=[src], dsts=[dst], replica_group=group, metadata_tensor=m,
                     has_rdispls=has_rdispls)
    nisa.dma_copy(dst=out, src=dst)
    nisa.dma_copy(dst=meta_out, src=m)
    return out, meta_out


@nki.jit
def all_to_all_v_sbuf_metadata(x, meta, group):
    # The metadata on one SBUF partition: (1, rows, group size).
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray((1,) + tuple(meta.shape), dtype=meta.dtype, buffer=nl.sbuf)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    meta_out = nl.ndarray(meta.shape, dtype=meta.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    nisa.dma_copy(dst=dst, src=x)
    nisa.dma_copy(dst=m, src=meta.reshape((1,) + tuple(meta.shape)))
    ncc.all_to_all_v(srcs=[src], dsts=[dst], replica_group=group, metadata_tensor=m)
    nisa.dma_copy(dst=out, src=dst)
    nisa.dma_copy(dst=meta_out.reshape((1,) + tuple(meta.shape)), src=m)
    return out, meta_out


@nki.jit
def all_gather_v_hbm(x, meta, group):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray(meta.shape, dtype=meta.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    meta_out = nl.ndarray(meta.shape, dtype=meta.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    nisa.dma_copy(dst=m, src=meta)
    nisa.dma_copy(dst=dst, src=x)
    ncc.all_gather_v(srcs=[src], dsts=[dst], replica_group=group, metadata_tensor=m)
    nisa.dma_copy(dst=out, src=dst)
    nisa.dma_copy(dst=meta_out, src=m)
    return out, meta_out


@nki.jit
def permute_hbm(x, pairs):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    nisa.dma_copy(dst=dst, src=x)  # a rank that receives nothing keeps this
    ncc.collective_permute(srcs=[src], dsts=[dst], source_target_pairs=pairs)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def ring_hbm(x, group):
    # Two channels, each half of x, around the ring; then which rank's data arrived.
    h = x.shape[0] // 2
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.collective_permute_implicit(srcs_by_channel=[[src[0:h, :]], [src[h:2 * h, :]]],
                                    dsts_by_channel=[[dst[0:h, :]], [dst[h:2 * h, :]]],
                                    replica_group=group, channel_ids=[0, 1])
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def ring_reduce_sbuf(x, y, group):
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    c = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=y)
    ncc.collective_permute_implicit_reduce(srcs0_by_channel=[[a]], srcs1_by_channel=[[b]],
                                           dsts_by_channel=[[c]], replica_group=group,
                                           op=nl.add)
    nisa.dma_copy(dst=out, src=c)
    return out


@nki.jit
def ring_ids(table, group, steps):
    # Row k of the output: the table row of the rank whose data this rank holds after k steps.
    out = nl.ndarray((steps, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    for k in range(steps):
        who = ncc.collective_permute_implicit_current_processing_rank_id(
            iteration_id=k, replica_group=group)
        nisa.dma_copy(dst=out[k:k + 1, :], src=table[who:who + 1, :])
    return out


@nki.jit
def rank_slice(table):
    # AWS's pattern: rank_id as the scalar offset of an access pattern.
    _, h, w = table.shape
    out = nl.ndarray((h, w), dtype=table.dtype, buffer=nl.shared_hbm)
    r = ncc.rank_id()
    nisa.dma_copy(dst=out, src=table.ap(pattern=[[w, h], [1, w]], scalar_offset=r, indirect_dim=0))
    return out


@nki.jit
def mixed_memories(x, group):
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=a, src=x)
    ncc.all_reduce(srcs=[a], dsts=[d], replica_group=group, op=nl.add)
    return d


# ---------------------------------------------------------------------------------------------
# the ranks


def _inputs(world, shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(world)]


def _check(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(
            got.view(np.uint8), want.view(np.uint8)):
        raise AssertionError(f"{what}: got\n{got}\nwant\n{want}")


def _rank_main():
    import torch
    import torch.distributed as dist

    import torch_neuronx  # noqa: F401 - registers the "neuron" backend and device

    dist.init_process_group("neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    sim = nki.simulate
    whole = ReplicaGroup([list(range(world))])
    halves = ReplicaGroup([list(range(world // 2)), list(range(world // 2, world))])
    mine = halves.group_of(rank)

    # all_reduce (HBM) against torch.distributed's all_reduce on the same data: the same bits.
    xs = _inputs(world, (8, 16))
    got = sim(all_reduce_hbm)(xs[rank], whole, nl.add)
    t = torch.from_numpy(xs[rank].copy())
    dist.all_reduce(t)
    _check(got, t.numpy(), "all_reduce hbm fp32")
    # bf16 on neuron tensors (nki.jit on the device): the backend's bf16 accumulation.
    xb = torch.from_numpy(xs[rank]).to(torch.bfloat16)
    got = all_reduce_hbm(xb.to("neuron"), whole, nl.add).cpu()
    t = xb.clone()
    dist.all_reduce(t)
    assert torch.equal(got.view(torch.int16), t.view(torch.int16)), "all_reduce bf16 on neuron"
    # Two sub-groups at once.
    got = sim(all_reduce_hbm)(xs[rank], halves, nl.maximum)
    _check(got, np.maximum.reduce([xs[r] for r in mine]), "all_reduce max, two sub-groups")
    got = sim(all_reduce_sbuf)(xs[rank], whole)
    _check(got, np.maximum.reduce(xs), "all_reduce sbuf max")
    ys = _inputs(world, (4, 8), seed=1)
    ints = [np.arange(12, dtype=np.int32).reshape(3, 4) * (r + 1) for r in range(world)]
    got_f, got_i = sim(all_reduce_coalesced)(ys[rank], ints[rank], whole)
    t = torch.from_numpy(ys[rank].copy())
    dist.all_reduce(t)
    _check(got_f, t.numpy(), "coalesced all_reduce fp32 part")
    _check(got_i, sum(ints), "coalesced all_reduce int32 part")

    # fp16 on CPU tensors through nki.simulate: the backend's fp16 accumulation.
    xh = torch.from_numpy(xs[rank] * 100).to(torch.float16)
    got = sim(all_reduce_hbm)(xh, whole, nl.add)
    t = xh.clone()
    dist.all_reduce(t)
    assert torch.equal(got.view(torch.int16), t.view(torch.int16)), "all_reduce fp16"

    # all_gather: HBM dim 0, SBUF dims 0 and 1, in the sub-group's order; a coalesced call.
    got = sim(all_gather_hbm)(xs[rank], whole, world)
    _check(got, np.concatenate(xs, axis=0), "all_gather hbm")
    got = sim(all_gather_hbm)(xs[rank], halves, len(mine))
    _check(got, np.concatenate([xs[r] for r in mine], axis=0), "all_gather two sub-groups")
    got_f, got_i = sim(all_gather_coalesced)(ys[rank], ints[rank], whole, world)
    _check(got_f, np.concatenate(ys, axis=0), "coalesced all_gather fp32 part")
    _check(got_i, np.concatenate(ints, axis=0), "coalesced all_gather int32 part")
    for dim in (0, 1):
        got = sim(all_gather_sbuf)(xs[rank], whole, world, dim)
        _check(got, np.concatenate(xs, axis=dim), f"all_gather sbuf dim {dim}")

    # reduce_scatter: part i to group rank i; torch's reduce_scatter_tensor gives the bits.
    zs = _inputs(world, (4 * world, 8), seed=2)
    got = sim(reduce_scatter_hbm)(zs[rank], whole, world)
    t = torch.empty(4, 8)
    dist.reduce_scatter_tensor(t, torch.from_numpy(zs[rank].copy()))
    _check(got, t.numpy(), "reduce_scatter hbm")
    got = sim(reduce_scatter_sbuf)(zs[rank], whole, world)
    _check(got, np.minimum.reduce(zs)[4 * rank:4 * rank + 4], "reduce_scatter sbuf min")

    # A sub-group listed out of order: its list order is the parts' order (torch numbers a
    # group's ranks sorted; the exchange maps between the two).
    backwards = ReplicaGroup([list(reversed(range(world)))])
    got = sim(all_gather_hbm)(xs[rank], backwards, world)
    _check(got, np.concatenate(xs[::-1], axis=0), "all_gather, group listed backwards")
    got = sim(reduce_scatter_hbm)(zs[rank], backwards, world)
    p = world - 1 - rank
    want = torch.empty(4, 8)
    dist.reduce_scatter_tensor(want, torch.from_numpy(zs[rank].copy()))  # the same sums, ...
    whole_sum = [torch.empty(4, 8) for _ in range(world)]
    dist.all_gather(whole_sum, want)  # ... so every part of the reduction is known here
    _check(got, whole_sum[p].numpy(), "reduce_scatter, group listed backwards")
    got = sim(all_to_all_hbm)(zs[rank], backwards)
    want = np.concatenate([zs[world - 1 - q][4 * p:4 * p + 4] for q in range(world)])
    _check(got, want, "all_to_all, group listed backwards")

    # all_to_all: part j of rank i's input -> part i of rank j's output.
    got = sim(all_to_all_hbm)(zs[rank], whole)
    want = np.concatenate([zs[r][4 * rank:4 * rank + 4] for r in range(world)])
    _check(got, want, "all_to_all hbm")
    pos = mine.index(rank)
    n = len(mine)
    ws = _inputs(world, (2 * n, 4), seed=3)
    got = sim(all_to_all_hbm)(ws[rank], halves)
    want = np.concatenate([ws[r][2 * pos:2 * pos + 2] for r in mine])
    _check(got, want, "all_to_all two sub-groups")

    # all_to_all_v: rank r sends r + 1 + j elements to group rank j, from displacement 3 j.
    elems = 4 * world * world
    vs = [np.arange(elems, dtype=np.float32) + 1000 * r for r in range(world)]

    def counts(r, j):
        return (r + 1 + j) % 4

    for has_rdispls in (False, True):
        rows = 4 if has_rdispls else 3
        meta = np.zeros((rows, world), dtype=np.uint32)
        meta[0] = [counts(rank, j) for j in range(world)]
        meta[1] = [3 * j for j in range(world)]
        if has_rdispls:
            meta[3] = [5 * j for j in range(world)]
        got, meta_out = sim(all_to_all_v_hbm)(vs[rank], meta, whole, has_rdispls)
        want = vs[rank].copy()
        slot = elems // world
        for j in range(world):
            c = counts(j, rank)
            at = 5 * j if has_rdispls else slot * j
            want[at:at + c] = vs[j][3 * rank:3 * rank + c]
        _check(got, want, f"all_to_all_v has_rdispls={has_rdispls}")
        assert list(meta_out[2]) == [counts(j, rank) for j in range(world)], meta_out

    meta = np.zeros((3, world), dtype=np.uint32)
    meta[0] = [counts(rank, j) for j in range(world)]
    meta[1] = [3 * j for j in range(world)]
    got, meta_out = sim(all_to_all_v_sbuf_metadata)(vs[rank], meta, whole)
    assert list(meta_out[2]) == [counts(j, rank) for j in range(world)], meta_out
    slot = elems // world
    want = vs[rank].copy()
    for j in range(world):
        want[slot * j:slot * j + counts(j, rank)] = vs[j][3 * rank:3 * rank + counts(j, rank)]
    _check(got, want, "all_to_all_v, metadata in SBUF")

    # all_gather_v: rank r sends its r + 1 elements from displacement 2 to every rank (only the
    # first column of rows 0 and 1 counts); they land in equal slots.
    meta = np.zeros((3, world), dtype=np.uint32)
    meta[0] = [rank + 1] + [99] * (world - 1)
    meta[1] = [2] + [99] * (world - 1)
    got, meta_out = sim(all_gather_v_hbm)(vs[rank], meta, whole)
    want = vs[rank].copy()
    for j in range(world):
        want[slot * j:slot * j + j + 1] = vs[j][2:2 + j + 1]
    _check(got, want, "all_gather_v")
    assert list(meta_out[2]) == [j + 1 for j in range(world)], meta_out

    # collective_permute: a shift by one; the ring forms and their rank ids.
    shift = [(r, (r + 1) % world) for r in range(world)]
    got = sim(permute_hbm)(xs[rank], shift)
    _check(got, xs[(rank - 1) % world], "collective_permute shift")
    got = sim(permute_hbm)(xs[rank], [(0, world - 1)])  # one pair: the others keep dst
    _check(got, xs[0] if rank == world - 1 else xs[rank], "collective_permute one pair")
    got = sim(ring_hbm)(xs[rank], halves)
    _check(got, xs[mine[(pos - 1) % n]], "collective_permute_implicit two channels")
    got = sim(ring_reduce_sbuf)(xs[rank], ys[rank][:, :8].repeat(2, 0).repeat(2, 1), whole)
    prev = (rank - 1) % world
    want = (xs[prev] + ys[prev][:, :8].repeat(2, 0).repeat(2, 1)).astype(np.float32)
    _check(got, want, "collective_permute_implicit_reduce")
    table = np.arange(world * 3, dtype=np.float32).reshape(world, 3)
    got = sim(ring_ids)(table, whole, world)
    _check(got, table[[(rank - k) % world for k in range(world)]], "ring rank ids")
    got = sim(ring_ids)(table, halves, n)
    _check(got, table[[mine[(pos - k) % n] for k in range(n)]], "ring rank ids, sub-groups")
    cube = np.arange(world * 2 * 3, dtype=np.float32).reshape(world, 2, 3)
    _check(sim(rank_slice)(cube), cube[rank], "rank_id as scalar_offset")
    assert ncc.rank_id() == rank

    # The collective's modelled time is the process group's price for the same call: the
    # kernel minus its copies equals an all_reduce of the same bytes on the DMA queues.
    big = np.ones((128, 512), dtype=np.float32)
    sim(all_reduce_hbm)(big, whole, nl.add)
    with_collective = all_reduce_hbm.last_run.makespan_ns
    sim(copies_only)(big)
    alone = copies_only.last_run.makespan_ns
    price = _C_price(world, big.nbytes)
    assert abs((with_collective - alone) - price) <= 1e-6 * price, (with_collective, alone, price)

    # Refusals every rank raises alike: shapes that disagree, a rank outside the group.
    bad = np.ones((2 + 2 * (rank % 2), 3), dtype=np.float32)
    with pytest.raises(nki.NkiError, match="disagree"):
        sim(all_reduce_hbm)(bad, whole, nl.add)
    with pytest.raises(nki.NkiError, match="whose destination is|into"):
        sim(permute_hbm)(bad, shift)
    with pytest.raises(nki.NkiError, match="disagree"):  # on the device: the launch fails alike
        all_reduce_hbm(torch.from_numpy(bad).to("neuron"), whole, nl.add)
    got = all_reduce_hbm(torch.from_numpy(xs[rank]).to("neuron"), whole, nl.add).cpu()
    t = torch.from_numpy(xs[rank].copy())
    dist.all_reduce(t)
    assert torch.equal(got, t), "a device launch after a refused one"
    if world == 2:
        if rank == 1:
            with pytest.raises(nki.NkiError, match="rank 1 is in no sub-group"):
                sim(all_reduce_hbm)(xs[rank], ReplicaGroup([[0]]), nl.add)
        else:
            _check(sim(all_reduce_hbm)(xs[rank], ReplicaGroup([[0]]), nl.add), xs[0],
                   "a group of rank 0 alone")
    with pytest.raises(nki.NkiError, match="names ranks"):
        sim(all_reduce_hbm)(xs[rank], ReplicaGroup([list(range(world + 1))]), nl.add)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} ok", flush=True)


def _C_price(world, nbytes):
    """What the process group's all_reduce of `nbytes` costs on the links: its launch record's
    modelled time less the launch's fixed cost."""
    import torch
    import torch.distributed as dist

    import torch_neuronx

    torch_neuronx.clear_kernel_trace()
    dist.all_reduce(torch.ones(nbytes // 4, device="neuron"))
    records = [r for r in torch_neuronx.kernel_trace() if r["kind"] == "collective"]
    assert len(records) == 1, records
    return records[0]["sim_ns"] - torch_neuronx.core_model()["kernel_launch_ns"]


if __name__ == "__main__":
    _rank_main()
    sys.exit(0)


# ---------------------------------------------------------------------------------------------
# the tests


def _run(world):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))
    from launcher import assert_all_ok, run_ranks

    results = run_ranks(str(Path(__file__).resolve()), world, timeout=300)
    assert_all_ok(results)
    assert all(f"rank {r.rank} ok" in r.output for r in results)


def test_every_form_at_two_ranks():
    _run(2)


def test_every_form_at_four_ranks_and_two_sub_groups():
    _run(4)


def test_without_a_process_group_a_group_of_other_ranks_is_refused():
    x = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(nki.NkiError, match="torchrun"):
        nki.simulate(all_reduce_hbm)(x, ReplicaGroup([[0, 1]]), nl.add)


def test_without_a_process_group_a_job_of_one_rank_runs():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(nki.simulate(all_reduce_hbm)(x, ReplicaGroup([[0]]), nl.add), x)
    np.testing.assert_array_equal(nki.simulate(all_gather_hbm)(x, ReplicaGroup([[0]]), 1), x)
    np.testing.assert_array_equal(nki.simulate(permute_hbm)(x, [(0, 0)]), x)
    assert ncc.rank_id() == 0


def test_a_job_of_one_rank_needs_no_torch():
    # nki alone (NumPy in, NumPy out): a group of rank 0 runs without importing torch.
    script = (
        "import sys, numpy as np, nki, nki.isa as nisa, nki.language as nl\n"
        "import nki.collectives as ncc\n"
        "sys.path.insert(0, %r)\n"
        "from test_in_kernel_collectives import all_reduce_hbm, all_to_all_v_hbm, ring_hbm\n"
        "g = ncc.ReplicaGroup([[0]])\n"
        "x = np.arange(8, dtype=np.float32).reshape(4, 2)\n"
        "assert (nki.simulate(all_reduce_hbm)(x, g, nl.add) == x).all()\n"
        "assert (nki.simulate(ring_hbm)(x, g) == x).all()\n"
        "meta = np.array([[3], [1], [0]], dtype=np.uint32)\n"
        "out, m = nki.simulate(all_to_all_v_hbm)(x, meta, g, False)\n"
        "want = x.copy().reshape(-1); want[0:3] = x.reshape(-1)[1:4]\n"
        "assert (out.reshape(-1) == want).all() and m[2, 0] == 3, (out, m)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    ) % str(Path(__file__).parent)
    import subprocess

    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mixed_memories_and_bad_arguments_are_refused():
    x = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(nki.NkiError, match="must all be on HBM or all on SBUF"):
        nki.simulate(mixed_memories)(x, ReplicaGroup([[0]]))
    with pytest.raises(nki.NkiError, match="nl.add, nl.minimum or nl.maximum"):
        nki.simulate(all_reduce_hbm)(x, ReplicaGroup([[0]]), nl.multiply)
    with pytest.raises(nki.NkiError, match="must not overlap"):
        ncc.ReplicaGroup([[0, 1], [1, 2]])
    assert ncc.ReplicaGroup([[0, 1], [2, 3]]).group_of(2) == (2, 3)
    with pytest.raises(nki.NkiError, match="has_rdispls=True is not supported"):
        ncc.all_gather_v([], [], ReplicaGroup([[0]]), None, has_rdispls=True)
    if os.environ.get("RANK") is None:
        assert ncc.context() is None
