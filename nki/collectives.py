"""``nki.collectives``: collective communication between the ranks of a job from inside a kernel
(NKI 0.6).

A rank is a process of a torch.distributed job (one NeuronCore per process, the project's
layout: docs/distributed.md), and every rank runs the same kernel (SPMD). Each collective call
is traced into collective instructions (one per tensor of a coalesced call or channel of a ring
permute, runtime/nki/Collective.h); when the interpreter reaches one it stages this rank's tile
and calls the exchange installed here, which moves the tiles through torch.distributed's
process groups (the "neuron" backend) at that point of the program, so the bits are those of the
torch.distributed collective (its reduction order, bf16 / fp16 accumulated as the backend does).
The runtime stays torch-free: it only stops at the instruction and hands the exchange over.

What each rank sees:
  all_reduce      every rank of a sub-group gets op over the group's tiles (dist.all_reduce)
  all_gather      the group's tiles in group order, concatenated along collective_dim
  reduce_scatter  op over the group's tiles, split along dim 0: group rank i keeps part i
  all_to_all      part j of group rank i's tile (dim 0) goes to part i of group rank j's
  all_to_all_v    flat element chunks by the uint32 metadata rows (send counts, send displs,
                  recv counts, recv displs) per group rank
  all_gather_v    one flat chunk (rows 0 / 1, first column) to every rank of the group, landing
                  by rows 2 / 3 as all_to_all_v's
  collective_permute   each (source, target) pair: target's dst <- source's src
  collective_permute_implicit(_reduce)   a ring in the group's list order: each rank sends to
                  its successor and receives from its predecessor (the reduce form sends
                  op(src0, src1), computed in FP32 and rounded to dst's dtype)
  rank_id()       this process's rank in the job (torch.distributed.get_rank(); 0 without one)
  collective_permute_implicit_current_processing_rank_id(k, group)   the rank whose data this
                  rank holds after k ring steps: group[(position - k) mod size]

Without torch.distributed a kernel runs as a job of one rank: a collective whose every sub-group
is [0] is the identity; one that names other ranks raises an NkiError saying how to start the
ranks.
"""

from __future__ import annotations

import json
import os
import sys

from nki import _core
from nki import _nki
from nki._core import DMA, Tensor, error

# Collective kinds (nrtsim::nki::CollectiveKind).
(ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, ALL_TO_ALL_V, PERMUTE, PERMUTE_IMPLICIT,
 PERMUTE_IMPLICIT_REDUCE, ALL_GATHER_V) = range(9)
_REDUCTIONS = ("add", "maximum", "minimum")
# Stored formats torch.distributed reduces (by nrtsim::nki::DType code): the float8 formats and
# the unsigned 16 / 32-bit integers are moved but not reduced.
_REDUCIBLE = {0: "float32", 1: "bfloat16", 2: "float16", 6: "int32", 8: "int16", 10: "int8",
              11: "uint8"}
_START = ("run the ranks under torchrun with torch.distributed.init_process_group('neuron') "
          "before the kernel runs")


class ReplicaGroup(_core.NKIObject):
    """The ranks of a collective: a list of sub-groups (lists of ranks) that do not overlap;
    each sub-group runs the collective among its own ranks, in its list order (the ring order of
    the implicit permutes). ``ReplicaGroup([[0, 1], [2, 3]])``."""

    replica_groups: list

    def __post_init__(self):
        groups = self.replica_groups
        if isinstance(groups, ReplicaGroup):
            groups = groups.replica_groups
        try:
            groups = tuple(tuple(int(r) for r in g) for g in groups)
        except TypeError:
            raise error(f"ReplicaGroup takes a list of sub-groups (lists of ranks), got "
                        f"{self.replica_groups!r}") from None
        if not groups or any(not g for g in groups):
            raise error(f"ReplicaGroup {list(map(list, groups))}: every sub-group needs a rank")
        seen = set()
        for g in groups:
            for r in g:
                if r < 0:
                    raise error(f"ReplicaGroup {list(map(list, groups))}: rank {r} is negative")
                if r in seen:
                    raise error(f"ReplicaGroup {list(map(list, groups))}: rank {r} is in two "
                                "sub-groups (sub-groups must not overlap)")
                seen.add(r)
        object.__setattr__(self, "replica_groups", groups)

    def __hash__(self):
        return hash(self.replica_groups)

    def __eq__(self, other):
        return isinstance(other, ReplicaGroup) and other.replica_groups == self.replica_groups

    def group_of(self, rank):
        for g in self.replica_groups:
            if rank in g:
                return g
        return None


# ---------------------------------------------------------------------------------------------
# the job this process belongs to


def _dist():
    """torch.distributed when a process group is initialised in this process, else None."""
    # A process group exists only where torch.distributed was imported: nki imports neither.
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def context():
    """(rank, world size) of this process's job, or None without torch.distributed: kernels
    that use collectives specialise on it (nki._jit keys its cache with it)."""
    dist = _dist()
    return None if dist is None else (dist.get_rank(), dist.get_world_size())


def _place(replica_group, what):
    """This rank, its sub-group and its position in it, checking the group against the job."""
    if not isinstance(replica_group, ReplicaGroup):
        if isinstance(replica_group, (list, tuple)):
            replica_group = ReplicaGroup(replica_group)
        else:
            raise error(f"ncc.{what}: replica_group must be a ReplicaGroup, got "
                        f"{type(replica_group).__name__}")
    ctx = context()
    rank, world = ctx if ctx is not None else (0, 1)
    groups = [list(g) for g in replica_group.replica_groups]
    outside = sorted(r for g in replica_group.replica_groups for r in g if r >= world)
    if outside:
        if ctx is None:
            raise error(f"ncc.{what}: replica group {groups} names ranks {outside}, but this "
                        f"process is not part of a torch.distributed job (a job of one rank, "
                        f"rank 0); {_START}")
        raise error(f"ncc.{what}: replica group {groups} names ranks {outside}, but the job has "
                    f"{world} ranks (0..{world - 1}); name ranks of the job")
    group = replica_group.group_of(rank)
    if group is None:
        raise error(f"ncc.{what}: rank {rank} is in no sub-group of replica group {groups}; "
                    f"every rank that runs the kernel must be in one (launch the kernel on the "
                    f"ranks the group names, or add rank {rank} to it)")
    return replica_group, rank, group, group.index(rank)


# ---------------------------------------------------------------------------------------------
# tracing


def _tensors(xs, what, param):
    if isinstance(xs, Tensor):
        raise error(f"ncc.{what}: {param} is a list of tensors; got one tensor (pass [t])")
    try:
        xs = list(xs)
    except TypeError:
        raise error(f"ncc.{what}: {param} must be a list of NKI tensors, got "
                    f"{type(xs).__name__}") from None
    if not xs:
        raise error(f"ncc.{what}: {param} is empty")
    for x in xs:
        if not isinstance(x, Tensor):
            raise error(f"ncc.{what}: {param} must hold NKI tensors, got {type(x).__name__}")
    return xs


def _memory(t):
    return "SBUF" if t._buffer.memory is _core.sbuf else (
        "PSUM" if t._buffer.memory is _core.psum else "HBM")


def _memories(tensors, what, allowed=("HBM", "SBUF"), coalesced_sbuf=False):
    kinds = {_memory(t) for t in tensors}
    if "PSUM" in kinds:
        raise error(f"ncc.{what}: a tensor is in PSUM; collectives move HBM or SBUF tensors: "
                    "copy the tile to SBUF first")
    if len(kinds) > 1:
        raise error(f"ncc.{what}: the tensors are on HBM and on SBUF; a collective's tensors "
                    "must all be on HBM or all on SBUF (mixing memories is not supported)")
    kind = kinds.pop()
    if kind not in allowed:
        raise error(f"ncc.{what}: tensors must reside on HBM; {kind} is not supported for "
                    f"{what}")
    if kind == "SBUF" and len(tensors) > 2 and not coalesced_sbuf:
        raise error(f"ncc.{what}: coalesced calls (several tensors) are supported only on HBM; "
                    "issue one call per SBUF tile")
    return kind


def _pairs(srcs, dsts, what):
    if len(srcs) != len(dsts):
        raise error(f"ncc.{what}: {len(srcs)} sources for {len(dsts)} destinations; pass one "
                    "destination per source")
    return list(zip(srcs, dsts))


def _reduction(op, what):
    from nki import _ops
    from nki.isa import _alu

    name = getattr(_ops.resolve(op), "name", None)
    if name not in _REDUCTIONS:
        raise error(f"ncc.{what}: op must be nl.add, nl.minimum or nl.maximum, got {op!r}")
    return name, _alu(op)


def _check_reducible(t, what):
    if t.dtype.code not in _REDUCIBLE:
        raise error(f"ncc.{what}: {t.dtype} is moved by collectives but not reduced here "
                    f"(torch.distributed reduces {', '.join(sorted(set(_REDUCIBLE.values())))})")


def _name(name):
    if name is not None and not isinstance(name, str):
        raise error(f"name= must be a string, got {type(name).__name__}")


def _priority(priority, what):
    # DMA quality of service: accepted and checked, it does not change the modelled time.
    if priority is not None and (not isinstance(priority, int) or not 0 <= priority <= 3):
        raise error(f"ncc.{what}: priority is a level 0-3, got {priority!r}")


def _begin(what, name, priority, srcs=None, dsts=None):
    """The checks every call starts with; the tracer (and the srcs / dsts lists)."""
    _name(name)
    _priority(priority, what)
    tracer = _core.current_tracer()
    if srcs is None:
        return tracer
    return tracer, _tensors(srcs, what, "srcs"), _tensors(dsts, what, "dsts")


def _next_call(tracer):
    n = getattr(tracer, "collective_calls", 0)
    tracer.collective_calls = n + 1
    return n


def _host(rank):
    """The host of a rank, as torchrun numbers them (LOCAL_WORLD_SIZE consecutive ranks per
    host); one host without it."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    return rank // int(local) if local.isdigit() and int(local) > 0 else 0


def _emit(tracer, kind, src, dst, desc, group, call, *, src1=None, metadata=None, alu=0,
          name=None):
    """One collective instruction. `group`: the ranks that move this call's bytes with this
    rank (its sub-group; for a permute, itself and its peers), which price it: imm0 their
    number, imm2 how many of them share this rank's host (Collective.h)."""
    text = json.dumps(dict(desc, kind=kind, call=call), sort_keys=True)
    ctx = context()
    rank = ctx[0] if ctx is not None else 0
    here = sum(1 for r in group if _host(r) == _host(rank))
    return tracer.emit(_core.OP_COLLECTIVE, DMA, dst, src, None, src1, metadata, name=name,
                       axes=kind, alu0=alu, imm0=float(len(group)), imm1=float(call),
                       imm2=float(here), text=text)


def _same_dtype(src, dst, what):
    if src.dtype != dst.dtype:
        raise error(f"ncc.{what}: src is {src.dtype} and dst {dst.dtype}; a collective moves "
                    "one dtype (convert with a copy first)")


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None):
    """Every rank of each sub-group gets op (nl.add / nl.minimum / nl.maximum) over the
    sub-group's tensors, element by element; srcs[i] -> dsts[i], same shapes."""
    what = "all_reduce"
    tracer, srcs, dsts = _begin(what, name, priority, srcs, dsts)
    _memories(srcs + dsts, what)
    group_desc, rank, group, _ = _place(replica_group, what)
    opname, alu = _reduction(op, what)
    call = _next_call(tracer)
    for s, d in _pairs(srcs, dsts, what):
        _same_dtype(s, d, what)
        _check_reducible(s, what)
        if s.shape != d.shape:
            raise error(f"ncc.{what}: src {s.shape} and dst {d.shape} must have one shape")
        _emit(tracer, ALL_REDUCE, s, d, {"groups": group_desc.replica_groups, "op": opname},
              group, call, alu=alu, name=name)


def _dim(collective_dim, allowed, what, memory):
    if not isinstance(collective_dim, int) or collective_dim not in allowed:
        raise error(f"ncc.{what}: collective_dim={collective_dim!r} is not supported for {memory} "
                    f"tensors (supported: {', '.join(map(str, allowed))})")
    return collective_dim


def _sbuf_2d(t, what):
    if len(t.shape) != 2:
        raise error(f"ncc.{what}: SBUF collectives operate on 2-D tiles [partitions, free]; got "
                    f"{t.shape}")


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Each rank of a sub-group gets the sub-group's tensors, in group order, concatenated along
    collective_dim (0 on HBM; 0 or 1 on SBUF, whose tiles are 2-D)."""
    what = "all_gather"
    tracer, srcs, dsts = _begin(what, name, priority, srcs, dsts)
    memory = _memories(srcs + dsts, what)
    dim = _dim(collective_dim, (0,) if memory == "HBM" else (0, 1), what, memory)
    group_desc, rank, group, _ = _place(replica_group, what)
    n = len(group)
    call = _next_call(tracer)
    for s, d in _pairs(srcs, dsts, what):
        _same_dtype(s, d, what)
        if memory == "SBUF":
            _sbuf_2d(s, what)
            _sbuf_2d(d, what)
        want = tuple(x * n if k == dim else x for k, x in enumerate(s.shape))
        if tuple(d.shape) != want:
            raise error(f"ncc.{what}: dst {d.shape} must be src {s.shape} with dim {dim} times "
                        f"the {n} ranks of the sub-group: {want}")
        _emit(tracer, ALL_GATHER, s, d, {"groups": group_desc.replica_groups, "dim": dim},
              group, call, name=name)


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None):
    """op over the sub-group's tensors, split along dim 0 into one part per rank: group rank i
    gets part i."""
    what = "reduce_scatter"
    tracer, srcs, dsts = _begin(what, name, priority, srcs, dsts)
    memory = _memories(srcs + dsts, what)
    _dim(collective_dim, (0,), what, memory)
    group_desc, rank, group, _ = _place(replica_group, what)
    opname, alu = _reduction(op, what)
    n = len(group)
    call = _next_call(tracer)
    for s, d in _pairs(srcs, dsts, what):
        _same_dtype(s, d, what)
        _check_reducible(s, what)
        want = (s.shape[0] // n,) + tuple(s.shape[1:])
        if s.shape[0] % n or tuple(d.shape) != want:
            raise error(f"ncc.{what}: src {s.shape} splits along dim 0 into {n} parts (the "
                        f"sub-group's ranks); dst must be one part: {want}"
                        if s.shape[0] % n == 0 else
                        f"ncc.{what}: src dim 0 ({s.shape[0]}) must divide into the {n} ranks "
                        "of the sub-group")
        _emit(tracer, REDUCE_SCATTER, s, d, {"groups": group_desc.replica_groups, "op": opname},
              group, call, alu=alu, name=name)


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Split along dim 0 into one part per rank of the sub-group: part j of group rank i's src
    becomes part i of group rank j's dst. HBM only."""
    what = "all_to_all"
    tracer, srcs, dsts = _begin(what, name, priority, srcs, dsts)
    _memories(srcs + dsts, what, allowed=("HBM",))
    _dim(collective_dim, (0,), what, "HBM")
    group_desc, rank, group, _ = _place(replica_group, what)
    n = len(group)
    call = _next_call(tracer)
    for s, d in _pairs(srcs, dsts, what):
        _same_dtype(s, d, what)
        if tuple(s.shape) != tuple(d.shape) or s.shape[0] % n:
            raise error(f"ncc.{what}: src {s.shape} and dst {d.shape} need one shape whose dim 0 "
                        f"divides into the {n} ranks of the sub-group")
        _emit(tracer, ALL_TO_ALL, s, d, {"groups": group_desc.replica_groups}, group, call,
              name=name)


def _variable(kind, what, srcs, dsts, replica_group, metadata_tensor, recv_counts_known,
              has_rdispls, priority, name):
    """all_to_all_v and all_gather_v: one HBM src and dst as flat element buffers, and the
    uint32 metadata of rows x group size (SBUF: on one partition)."""
    tracer, srcs, dsts = _begin(what, name, priority, srcs, dsts)
    if len(srcs) != 1 or len(dsts) != 1:
        raise error(f"ncc.{what}: srcs and dsts hold exactly one tensor each")
    _memories(srcs + dsts, what, allowed=("HBM",))
    group_desc, rank, group, _ = _place(replica_group, what)
    n = len(group)
    if not isinstance(metadata_tensor, Tensor):
        raise error(f"ncc.{what}: metadata_tensor must be an NKI tensor")
    rows = 4 if has_rdispls else 3
    m = metadata_tensor
    if m.dtype.name != "uint32":
        raise error(f"ncc.{what}: metadata_tensor must be uint32, got {m.dtype}")
    hbm = _memory(m) == "HBM"
    want = (rows, n) if hbm else (1, rows, n)
    four = (4, n) if hbm else (1, 4, n)  # a 4th row may be there unused
    if _memory(m) == "PSUM" or (tuple(m.shape) != want and not (
            not has_rdispls and tuple(m.shape) == four)):
        raise error(f"ncc.{what}: metadata_tensor {m.shape} on {_memory(m)} must be {want} "
                    f"(rows x the {n} ranks of the sub-group; SBUF: one partition)")
    s, d = srcs[0], dsts[0]
    _same_dtype(s, d, what)
    call = _next_call(tracer)
    _emit(tracer, kind, s, d,
          {"groups": group_desc.replica_groups, "recv_counts_known": bool(recv_counts_known),
           "has_rdispls": bool(has_rdispls)}, group, call, metadata=m, name=name)


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False,
                 has_rdispls=False, priority=None, name=None):
    """An all-to-all of flat element chunks whose sizes are known only when it runs: the uint32
    metadata rows (by group rank r) send_counts[r], send_displs[r], recv_counts[r] (written with
    what arrived unless recv_counts_known), recv_displs[r] (with has_rdispls; else chunk r lands
    at r * dst elements / group size). One HBM src and dst."""
    _variable(ALL_TO_ALL_V, "all_to_all_v", srcs, dsts, replica_group, metadata_tensor,
              recv_counts_known, has_rdispls, priority, name)


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False,
                 has_rdispls=False, priority=None, name=None):
    """A variable-length all-gather of flat element buffers: every rank sends the one chunk
    src[send_displ : send_displ + send_count] (rows 0 and 1, first column only) to every rank of
    its group; the chunk from group rank r lands at r * dst elements / group size (row 2, written
    unless recv_counts_known, says how many arrived). has_rdispls=True is not supported (AWS's
    stub says so)."""
    if has_rdispls:
        raise error("ncc.all_gather_v: has_rdispls=True is not supported (AWS's NKI 0.6 stub "
                    "lists it as a current limitation); leave row 3 out and let the chunks land "
                    "in equal slots")
    _variable(ALL_GATHER_V, "all_gather_v", srcs, dsts, replica_group, metadata_tensor,
              recv_counts_known, has_rdispls, priority, name)


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None):
    """For each (source, target) pair of ranks: the target's dst receives the source's src. A
    rank that is no pair's target keeps its dst. HBM, one tensor."""
    what = "collective_permute"
    tracer, srcs, dsts = _begin(what, name, priority, srcs, dsts)
    if len(srcs) != 1 or len(dsts) != 1:
        raise error(f"ncc.{what}: coalesced calls are not supported; srcs and dsts hold "
                    "exactly one tensor each")
    _memories(srcs + dsts, what, allowed=("HBM",))
    try:
        pairs = tuple((int(a), int(b)) for a, b in source_target_pairs)
    except (TypeError, ValueError):
        raise error(f"ncc.{what}: source_target_pairs must be (source, target) rank pairs, got "
                    f"{source_target_pairs!r}") from None
    sources = [a for a, _ in pairs]
    targets = [b for _, b in pairs]
    for role, ranks in (("source", sources), ("target", targets)):
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        if dup:
            raise error(f"ncc.{what}: ranks {dup} are the {role} of several pairs; each rank "
                        f"sends at most once and receives at most once")
    # A rank in no pair sends and receives nothing (its dst keeps its contents).
    ranks = sorted(set(sources + targets))
    ctx = context()
    world = ctx[1] if ctx is not None else 1
    outside = [r for r in ranks if r < 0 or r >= world]
    if outside:
        raise error(f"ncc.{what}: source_target_pairs name ranks {outside}, but "
                    + (f"the job has {world} ranks" if ctx is not None else
                       f"this process is not part of a torch.distributed job; {_START}"))
    s, d = srcs[0], dsts[0]
    _same_dtype(s, d, what)
    if s.shape != d.shape:
        raise error(f"ncc.{what}: src {s.shape} and dst {d.shape} must have one shape")
    call = _next_call(tracer)
    rank = ctx[0] if ctx is not None else 0
    peers = {b for a, b in pairs if a == rank} | {a for a, b in pairs if b == rank}
    _emit(tracer, PERMUTE, s, d, {"pairs": pairs}, [rank] + sorted(peers - {rank}), call,
          name=name)


def _channels(channel_ids, count, what):
    ids = list(channel_ids)
    if ids != list(range(len(ids))):
        raise error(f"ncc.{what}: channel_ids must be consecutive integers from 0, got {ids}")
    if len(ids) != count:
        raise error(f"ncc.{what}: {count} channels of tensors for channel_ids {ids}")
    if len(ids) > 4:
        raise error(f"ncc.{what}: at most 4 channels (4 for groups of every device of a node, "
                    f"2 for others); got {len(ids)}")
    return ids


def _by_channel(lists, what, param):
    try:
        lists = list(lists)
    except TypeError:
        raise error(f"ncc.{what}: {param} is a list (one per channel) of one-tensor "
                    "lists") from None
    out = []
    for inner in lists:
        xs = _tensors(inner, what, param)
        if len(xs) != 1:
            raise error(f"ncc.{what}: each channel of {param} holds exactly one tensor "
                        "(coalesced calls are not supported)")
        out.append(xs[0])
    if not out:
        raise error(f"ncc.{what}: {param} is empty")
    return out


def _ring_peers(group, rank):
    """This rank and its successor and predecessor in the ring (itself alone in a group of one)."""
    p = group.index(rank)
    return [rank] + sorted({group[(p + 1) % len(group)], group[(p - 1) % len(group)]} - {rank})


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,),
                                priority=None, name=None):
    """A ring in each sub-group's list order: every rank sends its src to its successor and
    receives its predecessor's into dst, per channel."""
    what = "collective_permute_implicit"
    tracer = _begin(what, name, priority)
    srcs = _by_channel(srcs_by_channel, what, "srcs_by_channel")
    dsts = _by_channel(dsts_by_channel, what, "dsts_by_channel")
    _memories(srcs + dsts, what, coalesced_sbuf=True)
    ids = _channels(channel_ids, len(srcs), what)
    group_desc, rank, group, _ = _place(replica_group, what)
    call = _next_call(tracer)
    for ch, (s, d) in zip(ids, _pairs(srcs, dsts, what)):
        _same_dtype(s, d, what)
        if s.numel() != d.numel() or s.shape != d.shape:
            raise error(f"ncc.{what}: channel {ch}: src {s.shape} and dst {d.shape} must have "
                        "one shape")
        _emit(tracer, PERMUTE_IMPLICIT, s, d, {"groups": group_desc.replica_groups,
                                               "channel": ch}, _ring_peers(group, rank), call,
              name=name)


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel,
                                       replica_group, op, channel_ids=(0,), priority=None,
                                       name=None):
    """The ring of collective_permute_implicit sending op(src0, src1) (computed in FP32 by the
    DMA engines, rounded to dst's dtype): dst receives the predecessor's reduced tile."""
    what = "collective_permute_implicit_reduce"
    tracer = _begin(what, name, priority)
    s0 = _by_channel(srcs0_by_channel, what, "srcs0_by_channel")
    s1 = _by_channel(srcs1_by_channel, what, "srcs1_by_channel")
    dsts = _by_channel(dsts_by_channel, what, "dsts_by_channel")
    _memories(s0 + s1 + dsts, what, coalesced_sbuf=True)
    if not len(s0) == len(s1) == len(dsts):
        raise error(f"ncc.{what}: {len(s0)}, {len(s1)} and {len(dsts)} channels of srcs0, srcs1 "
                    "and dsts; give each channel all three")
    ids = _channels(channel_ids, len(s0), what)
    group_desc, rank, group, _ = _place(replica_group, what)
    opname, alu = _reduction(op, what)
    call = _next_call(tracer)
    for ch, a, b, d in zip(ids, s0, s1, dsts):
        if not a.shape == b.shape == d.shape:
            raise error(f"ncc.{what}: channel {ch}: src0 {a.shape}, src1 {b.shape} and dst "
                        f"{d.shape} must have one shape")
        _emit(tracer, PERMUTE_IMPLICIT_REDUCE, a, d, {"groups": group_desc.replica_groups,
                                                      "channel": ch, "op": opname},
              _ring_peers(group, rank), call, src1=b, alu=alu, name=name)


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group,
                                                           channel_id=0, name=None):
    """The rank whose data this rank holds after `iteration_id` steps of the ring (its own at
    0, then its predecessor's, ...): group[(position - iteration_id) mod size]. Every channel
    runs the same ring. A rank ID of the job, usable as a static offset (scalar_offset=)."""
    what = "collective_permute_implicit_current_processing_rank_id"
    _name(name)
    if not isinstance(iteration_id, int) or iteration_id < 0:
        raise error(f"ncc.{what}: iteration_id must be a ring step >= 0 known when the kernel "
                    f"specialises (an integer; a register is not supported), got "
                    f"{iteration_id!r}")
    if not isinstance(channel_id, int) or not 0 <= channel_id < 4:
        raise error(f"ncc.{what}: channel_id must be 0..3, got {channel_id!r}")
    _, rank, group, pos = _place(replica_group, what)
    return group[(pos - iteration_id) % len(group)]


_core.PARTIAL["nki.collectives.all_gather_v"] = (
    "has_rdispls=True is refused (AWS's stub lists it as not supported)")
_core.PARTIAL["nki.collectives.collective_permute_implicit_current_processing_rank_id"] = (
    "iteration_id must be known when the kernel specialises (an integer): a register "
    "(a device loop's induction value) is refused, as the ring's rank ids are resolved then")


def rank_id(name=None):
    """This process's rank in its job (torch.distributed.get_rank(); 0 for a process without a
    process group, a job of one rank). A value known when the kernel specialises (each rank
    specialises its own kernel), usable wherever the kernel takes an integer offset."""
    _name(name)
    ctx = context()
    return 0 if ctx is None else ctx[0]




# ---------------------------------------------------------------------------------------------
# the exchange the interpreter calls at a collective instruction


def _install():
    from nki import _exchange

    _nki.set_collective_exchange(_exchange.exchange)


_install()
