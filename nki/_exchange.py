"""The exchange behind ``nki.collectives``: the interpreter (runtime/nki/Collective.h) stops at a
collective instruction, stages this rank's tile and calls ``exchange``, which moves the tiles
through torch.distributed (the "neuron" backend) as CPU tensors over the staged bytes, and
writes what arrives into the staged destination.

Every rank runs the same kernel and so reaches the same collective instructions in the same
order (SPMD): each exchange first checks that the ranks agree on what the instruction moves
(every rank raises the same NkiError when they do not, instead of hanging in a transfer), and
the process group of a sub-group is created at its first use, by exactly the ranks of that
sub-group (``use_local_synchronization``), then cached. torch is used only here, and only when a
kernel with collectives runs: the one the process imported (nki._core.loaded_torch; nki never
imports it).
"""

from __future__ import annotations

import json
import math

import numpy as np

from nki import _core
from nki import collectives as _ncc

# Process groups by sub-group (a tuple of ranks): (the WORLD group they were made under, group).
_GROUPS = {}
_REDUCE = {"add": "SUM", "maximum": "MAX", "minimum": "MIN"}


def _error(text, message):
    desc = json.loads(text)
    kind = desc.get("kind_name") or "collective"
    return _core.NkiError(f"nki.collectives ({kind}): {message}")


# ---------------------------------------------------------------------------------------------
# staged tiles as torch tensors (no copies: views of the interpreter's staging bytes)


def _raw(tile):
    """The tile's bytes as a uint8 tensor of its shape, the last dim in bytes."""
    torch = _core.loaded_torch("nki.collectives")
    mv, _, shape = tile
    shape = list(shape) or [1]
    n = math.prod(shape)
    if n == 0 or len(mv) == 0:
        return torch.empty(shape[:-1] + [0], dtype=torch.uint8)
    item = len(mv) // n
    return torch.frombuffer(mv, dtype=torch.uint8).view(shape[:-1] + [shape[-1] * item])


def _typed(tile):
    torch = _core.loaded_torch("nki.collectives")
    mv, code, shape = tile
    dtype = getattr(torch, _ncc._REDUCIBLE[code])
    if len(mv) == 0:
        return torch.empty(list(shape), dtype=dtype)
    return torch.frombuffer(mv, dtype=dtype).view(list(shape))


# ---------------------------------------------------------------------------------------------
# groups


def _group(dist, ranks):
    """The process group of sub-group `ranks` (sorted, as torch orders a group's ranks)."""
    world = dist.group.WORLD
    if list(ranks) == list(range(dist.get_world_size())):
        return world
    held = _GROUPS.get(ranks)
    if held is None or held[0] is not world:
        # Safe to create here: every rank reaches this collective instruction (SPMD), and the
        # ranks of this sub-group, exactly, create its group at their first use of it.
        held = (world, dist.new_group(list(ranks), use_local_synchronization=True))
        _GROUPS[ranks] = held
    return held[1]


def _job(text):
    """(torch.distributed, this rank, the description) for a run with a process group."""
    desc = json.loads(text)
    dist = _ncc._dist()
    if dist is None:
        return None, 0, desc
    backend = dist.get_backend()
    if backend != "neuron":
        raise _error(text, f"the process group's backend is {backend!r}; in-kernel collectives "
                           "run over the 'neuron' backend: "
                           "torch.distributed.init_process_group('neuron')")
    return dist, dist.get_rank(), desc


def _sub_group(text, desc, rank, world):
    groups = [tuple(g) for g in desc["groups"]]
    outside = sorted(r for g in groups for r in g if r >= world)
    if outside:
        raise _error(text, f"replica group {[list(g) for g in groups]} names ranks {outside}, "
                           f"but the job has {world} ranks")
    for g in groups:
        if rank in g:
            return g
    raise _error(text, f"rank {rank} is in no sub-group of replica group "
                       f"{[list(g) for g in groups]}")


def _agree(text, dist, pg, n, mine):
    """Every rank of the group checks that all of them describe the call alike (kind, call
    number, dtype, shapes): a mismatch raises the same NkiError on each rank."""
    torch = _core.loaded_torch("nki.collectives")
    mine = torch.tensor(mine, dtype=torch.int64)
    rows = torch.empty((n, mine.numel()), dtype=torch.int64)
    dist.all_gather_into_tensor(rows, mine, group=pg)
    ranks = sorted(dist.get_process_group_ranks(pg))
    first = rows[0].tolist()
    for j in range(1, n):
        if rows[j].tolist() != first:
            raise _error(text, f"the ranks disagree on this collective: rank {ranks[0]} has "
                               f"{_fields(first)}, rank {ranks[j]} has {_fields(rows[j].tolist())}"
                               "; every rank must run the same kernel on tensors of the same "
                               "shapes and dtypes")


def _fields(row):
    kind, call, code, nbytes, ndim = row[:5]
    shape = tuple(row[5:5 + ndim])
    names = {d.code: d.name for d in vars(_core).values() if isinstance(d, _core.DType)}
    text = f"{names.get(code, code)} {shape}"
    if len(row) > 10:  # the source, then the destination
        code, nbytes, ndim = row[10:13]
        text = f"source {text}, destination {names.get(code, code)} {tuple(row[13:13 + ndim])}"
    return f"{text} at collective call #{call}"


def _signature(kind, call, tile):
    mv, code, shape = tile
    shape = list(shape)[:5]
    return [kind, call, code, len(mv), len(shape)] + shape + [0] * (5 - len(shape))


# ---------------------------------------------------------------------------------------------
# the kinds


def exchange(text, kind_name, send, receive, metadata):
    desc = json.loads(text)
    desc["kind_name"] = kind_name
    text = json.dumps(desc)
    kind = desc["kind"]
    dist, rank, _ = _job(text)
    if kind in (_ncc.PERMUTE, _ncc.PERMUTE_IMPLICIT, _ncc.PERMUTE_IMPLICIT_REDUCE):
        return _permute(text, desc, dist, rank, send, receive)
    world = dist.get_world_size() if dist is not None else 1
    group = _sub_group(text, desc, rank, world)
    n = len(group)
    order = sorted(group)
    # torch numbers a group's ranks in sorted order; the replica group's list order is the
    # order of the parts: part p belongs to group[p].
    pos = [group.index(r) for r in order]  # torch's group rank j -> list position
    variable = kind in (_ncc.ALL_TO_ALL_V, _ncc.ALL_GATHER_V)
    if n == 1 and not variable:
        # A group of one (a job of one rank needs no torch): every form is the identity.
        receive[0][:] = send[0]
        return
    if n == 1:
        pg = None
    else:
        pg = _group(dist, tuple(order))
        # all_to_all_v's flat buffers may differ in size between ranks (the metadata says
        # what moves): only the call itself must agree.
        mine = [kind, desc["call"]] if variable else (
            _signature(kind, desc["call"], send) + _signature(kind, desc["call"], receive)[2:])
        _agree(text, dist, pg, n, mine)
    if kind == _ncc.ALL_REDUCE:
        out = _typed(receive)
        x = _typed(send)
        if pg is not None:
            dist.all_reduce(x, op=getattr(dist.ReduceOp, _REDUCE[desc["op"]]), group=pg)
        out.copy_(x)
    elif kind == _ncc.ALL_GATHER:
        _all_gather(dist, pg, n, pos, desc["dim"], send, receive)
    elif kind == _ncc.REDUCE_SCATTER:
        _reduce_scatter(dist, pg, n, pos, desc["op"], send, receive)
    elif kind == _ncc.ALL_TO_ALL:
        _all_to_all(dist, pg, n, pos, send, receive)
    elif variable:
        _all_to_all_v(text, desc, dist, pg, n, pos, send, receive, metadata)
    else:
        raise _error(text, f"unknown collective kind {kind}")


def _all_gather(dist, pg, n, pos, dim, send, receive):
    torch = _core.loaded_torch("nki.collectives")
    x, out = _raw(send), _raw(receive)
    if pg is None:
        out.copy_(x)
        return
    parts = torch.empty((n,) + tuple(x.shape), dtype=torch.uint8)
    dist.all_gather_into_tensor(parts, x.contiguous(), group=pg)
    ordered = [None] * n
    for j in range(n):
        ordered[pos[j]] = parts[j]
    out.copy_(torch.cat(ordered, dim=dim))


def _reduce_scatter(dist, pg, n, pos, op, send, receive):
    torch = _core.loaded_torch("nki.collectives")
    x, out = _typed(send), _typed(receive)
    if pg is None:
        out.copy_(x)
        return
    chunks = x.chunk(n, dim=0)
    # torch's group rank j receives chunk j: give it the chunk of its list position.
    inp = torch.cat([chunks[pos[j]] for j in range(n)], dim=0)
    dist.reduce_scatter_tensor(out, inp, op=getattr(dist.ReduceOp, _REDUCE[op]), group=pg)


def _all_to_all(dist, pg, n, pos, send, receive):
    torch = _core.loaded_torch("nki.collectives")
    x, out = _raw(send), _raw(receive)
    if pg is None:
        out.copy_(x)
        return
    chunks = x.reshape(n, -1)
    inp = torch.cat([chunks[pos[j]] for j in range(n)]).contiguous()
    got = torch.empty_like(inp)
    dist.all_to_all_single(got, inp, group=pg)
    got = got.reshape(n, -1)
    result = out.reshape(n, -1)
    for j in range(n):
        result[pos[j]].copy_(got[j])


def _all_to_all_v(text, desc, dist, pg, n, pos, send, receive, metadata):
    mv, _, shape = metadata
    meta = np.frombuffer(mv, dtype=np.uint32).reshape(-1, n)
    src, dst = np.frombuffer(send[0], dtype=np.uint8), np.frombuffer(receive[0], dtype=np.uint8)
    src_n, dst_n = math.prod(send[2]), math.prod(receive[2])
    item = len(send[0]) // src_n if src_n else 1
    send_counts = [int(c) for c in meta[0]]
    send_displs = [int(c) for c in meta[1]]
    if desc["kind"] == _ncc.ALL_GATHER_V:
        # all_gather_v: the one chunk of the first column goes to every rank.
        send_counts, send_displs = [send_counts[0]] * n, [send_displs[0]] * n
    for p in range(n):
        if send_displs[p] + send_counts[p] > src_n:
            raise _error(text, f"send chunk {p} (displacement {send_displs[p]}, count "
                               f"{send_counts[p]}) runs past the source's {src_n} elements")
    # Counts first (each rank learns what it receives from each), then the chunks.
    if pg is None:
        recv_counts = send_counts[:]
        chunks = [src[send_displs[0] * item:(send_displs[0] + send_counts[0]) * item]]
    else:
        torch = _core.loaded_torch("nki.collectives")
        counts = torch.tensor([send_counts[pos[j]] for j in range(n)], dtype=torch.int64)
        got = torch.empty_like(counts)
        dist.all_to_all_single(got, counts, group=pg)
        recv_counts = [0] * n
        for j in range(n):
            recv_counts[pos[j]] = int(got[j])
        inp = torch.from_numpy(np.concatenate(
            [src[send_displs[pos[j]] * item:(send_displs[pos[j]] + send_counts[pos[j]]) * item]
             for j in range(n)]))
        sizes_in = [send_counts[pos[j]] * item for j in range(n)]
        sizes_out = [recv_counts[pos[j]] * item for j in range(n)]
        out = torch.empty(sum(sizes_out), dtype=torch.uint8)
        dist.all_to_all_single(out, inp, output_split_sizes=sizes_out,
                               input_split_sizes=sizes_in, group=pg)
        pieces = out.numpy()
        pieces = np.split(pieces, np.cumsum(sizes_out)[:-1])
        chunks = [None] * n
        for j in range(n):
            chunks[pos[j]] = pieces[j]
    if desc["has_rdispls"]:
        recv_displs = [int(c) for c in meta[3]]
    else:
        recv_displs = [(dst_n // n) * p for p in range(n)]
    spans = []
    for p in range(n):
        lo, hi = recv_displs[p], recv_displs[p] + recv_counts[p]
        if hi > dst_n:
            raise _error(text, f"the chunk from group rank {p} ({recv_counts[p]} elements at "
                               f"{lo}) runs past the destination's {dst_n} elements")
        if hi > lo:
            spans.append((lo, hi, p))
    spans.sort()
    for (lo0, hi0, p0), (lo1, _, p1) in zip(spans, spans[1:]):
        if lo1 < hi0:
            raise _error(text, f"the chunks from group ranks {p0} and {p1} overlap in the "
                               "destination; give them disjoint recv displacements")
    for p in range(n):
        if recv_counts[p]:
            dst[recv_displs[p] * item:(recv_displs[p] + recv_counts[p]) * item] = chunks[p]
    if not desc["recv_counts_known"]:
        meta[2] = np.asarray(recv_counts, dtype=np.uint32)


def _permute(text, desc, dist, rank, send, receive):
    """One tile to a target rank and one from a source rank (a pair list, or the ring of a
    sub-group: successor and predecessor)."""
    world = dist.get_world_size() if dist is not None else 1
    if desc["kind"] == _ncc.PERMUTE:
        pairs = [tuple(p) for p in desc["pairs"]]
        outside = sorted({r for p in pairs for r in p if r >= world})
        if outside:
            raise _error(text, f"source_target_pairs name ranks {outside}, but the job has "
                               f"{world} ranks")
        targets = [b for a, b in pairs if a == rank]
        sources = [a for a, b in pairs if b == rank]
        target = targets[0] if targets else None
        source = sources[0] if sources else None
    else:
        group = _sub_group(text, desc, rank, world)
        p = group.index(rank)
        target, source = group[(p + 1) % len(group)], group[(p - 1) % len(group)]
    if target == rank and source == rank:
        receive[0][:] = send[0]
        return
    if target is None and source is None:
        return  # in no pair: nothing moves, dst keeps its contents
    if dist is None:
        raise _error(text, f"this process is not part of a torch.distributed job; "
                           f"{_ncc._START}")
    torch = _core.loaded_torch("nki.collectives")
    x, out = _raw(send), _raw(receive)
    # Both ends of each link learn both descriptions, so a mismatch raises on both.
    kind, call = desc["kind"], desc["call"]
    mine_src = torch.tensor(_signature(kind, call, send), dtype=torch.int64)
    mine_dst = torch.tensor(_signature(kind, call, receive), dtype=torch.int64)
    their_dst = torch.empty_like(mine_src)
    their_src = torch.empty_like(mine_src)
    # Between two ranks messages match in order (and tag): every rank sends to its target
    # before its source and receives from its source before its target, so that a ring of two
    # (target and source one rank) pairs them up.
    sends, recvs = [], []
    if target is not None:
        sends.append(dist.P2POp(dist.isend, mine_src, target, tag=1))
    if source is not None:
        sends.append(dist.P2POp(dist.isend, mine_dst, source, tag=2))
        recvs.append(dist.P2POp(dist.irecv, their_src, source, tag=1))
    if target is not None:
        recvs.append(dist.P2POp(dist.irecv, their_dst, target, tag=2))
    ops = sends + recvs
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    if target is not None and their_dst[2:].tolist() != mine_src[2:].tolist():
        raise _error(text, f"rank {rank} sends {_fields(mine_src.tolist())} to rank {target}, "
                           f"whose destination is {_fields(their_dst.tolist())}")
    if source is not None and their_src[2:].tolist() != mine_dst[2:].tolist():
        raise _error(text, f"rank {rank} receives {_fields(their_src.tolist())} from rank "
                           f"{source} into {_fields(mine_dst.tolist())}")
    ops = []
    got = torch.empty_like(out) if source is not None else None
    if target is not None:
        ops.append(dist.P2POp(dist.isend, x.contiguous(), target, tag=3))
    if source is not None:
        ops.append(dist.P2POp(dist.irecv, got, source, tag=3))
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    if got is not None:
        out.copy_(got)
