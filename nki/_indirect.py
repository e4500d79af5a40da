"""Runtime offsets. On an SBUF / PSUM tensor (`_on_chip_access`): one scalar offset along a free
dim, a view whose offset is a _core.RuntimeOffset, taken by any instruction (the interpreter
places the operand each time the instruction runs). On an HBM tensor, an indirect DMA: a
transfer whose HBM side is placed at run time by integer values held in an SBUF tile, one
instruction (OP_DMA_INDIRECT) for both APIs. NKI 0.6 spells it
``t.ap(pattern, offset, vector_offset=<[P, 1] tile>, indirect_dim=d)`` (partition p of the
transfer at index[p] along dim d of t: a gather when it is dma_copy's src, a scatter when dst),
``t.ap(..., scalar_offset=<[1, 1] tile>, indirect_dim=d)`` (the whole access moved by one value
along dim d) and ``t.vector_select(0, <[P, 1] tile>)``; the legacy API spells it
``t[<index tile>, ...]`` (nki.legacy.indirect).

The rules, as AWS documents them and its DMA engines take such a transfer: the indices are 32-bit
integers in SBUF; an index scales by the stride of dim ``indirect_dim`` of the tensor ``.ap`` is
called on, and the pattern's first pair gives the transfer's partitions (one per index; its own
stride is replaced by the index's). The values are read when the transfer runs; one that would
take the access outside dim ``indirect_dim`` (or, with the pattern's other pairs, outside the
tensor) is an error there (``oob_mode.error``, the default; the interpreter checks every index
before moving any row), naming the index and its partition. With ``oob_mode.skip`` such an index
moves nothing, the other indices' rows move (AWS's dma_copy: the instruction skips "the DMA
transfer for a given dynamic address or index when it is out of bound"; a scalar offset's one
index moves the whole access or nothing). A scatter whose indices repeat writes
the rows in partition order, the last partition's row staying: AWS's dma_copy documents that the
compiler synchronises the writes of repeated offsets rather than racing them.
"""

from __future__ import annotations

from nki import _core, _loops
from nki._core import DMA, OP_DMA_INDIRECT, Tensor, error

_INDEX_DTYPES = ("int32", "uint32")


class IndirectAccess:
    """An HBM tensor indexed on one dim by runtime values: `rows` views that dim whole (dim 0,
    every row an index may name, its stride the indexed dim's) followed by the access's other
    dims; `index` is the [P, 1] SBUF view of the indices. Per partition (`per_partition`, a
    vector offset), partition p of the transfer is row index[p]; otherwise (a scalar offset) the
    one index moves the whole access, all of `rows.shape[1:]`."""

    def __init__(self, rows, index, free_axes, base, indexed_dim, per_partition=True,
                 count=None, axis=None, limit=None):
        self.rows = rows
        self.index = index
        # Rows the access moves: one per index ([P, 1]); a [128, N] index tile (AWS's indirect
        # dma_transpose only) names up to 128 N of them, read column by column.
        self.count = index.shape[0] if count is None else count
        # Grid axes of the free dims (None for a dim from a slice), for masks.
        self.free_axes = list(free_axes)
        self.base = base  # the HBM tensor the kernel indexed, and which of its dims
        self.indexed_dim = indexed_dim
        self.per_partition = per_partition
        # The dim of this access that takes part in the indirection (AWS, NkiTensor.is_indirect:
        # it "cannot be further sliced or selected"): the partitions of a vector offset, the
        # dim of a dynamic slice nl.ds(i, n); None where a scalar offset dropped its dim.
        self.axis = 0 if per_partition else axis
        # The indices valid along the indexed dim before the tensor's end clips them (rows.shape
        # [0] is after): a narrower view of this access recomputes that clip.
        self.limit = rows.shape[0] if limit is None else int(limit)

    @property
    def shape(self):
        if not self.per_partition:
            return tuple(self.rows.shape[1:])
        return (self.count,) + tuple(self.rows.shape[1:])

    def is_indirect(self):
        return True

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def dtype(self):
        return self.rows.dtype

    # NkiTensor's other view methods, on an access already placed at run time.
    _REINDIRECT = ("ap", "vector_select", "indirect", "view", "reinterpret_cast")
    _NOT_MODELLED = ("permute", "broadcast", "broadcast_to", "expand_dim", "squeeze_dim",
                     "reshape_dim", "flatten_dims", "reshape", "rearrange", "T")

    def __getattr__(self, name):
        if name in IndirectAccess._REINDIRECT:
            raise error(f".{name} on an HBM access placed at run time: AWS refuses it (an "
                        "indirect view 'cannot be re-indirected', NkiTensor.is_indirect; view "
                        "is 'Not supported after dynamic / vector select'); apply it to the "
                        "tensor first")
        if name in IndirectAccess._NOT_MODELLED:
            raise error(f".{name} on an HBM access placed at run time is not modelled here "
                        "(select, slice and indexing are); apply it to the tensor before "
                        "placing it at run time")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")

    def _rows_dim(self, j):
        """The dim of `rows` that dim j of the access views (rows' dim 0 is the indexed one)."""
        return j if self.per_partition else j + 1

    def __getitem__(self, key):
        """A static view of the access on the dims outside the indirection (AWS's
        NkiTensor.select / slice: on an indirect view they may not target "a dimension that
        participates in the indirection"; the others compose). The runtime index stays as it
        was; the indices it may take are recomputed for the narrower access."""
        if not isinstance(key, tuple):
            key = (key,)
        if any(_core._runtime_index(k) or isinstance(k, Tensor) for k in key):
            raise error("a second runtime index on an access already placed at run time: AWS "
                        "allows 'only one dynamic select per tensor (no chaining)' "
                        "(NkiTensor.select); index the tensor once, or copy the access to SBUF "
                        "first")
        key = tuple(k.as_slice() if isinstance(k, _core.DynamicSlice) else k for k in key)
        if any(k is Ellipsis for k in key):
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - (len(key) - 1)) + key[i + 1:]
        if len(key) > self.ndim:
            raise error(f"too many indices ({len(key)}) for an access of shape {self.shape}")
        key = key + (slice(None),) * (self.ndim - len(key))
        rows = self.rows
        offset = rows.offset
        free, axes, axis = [], [], None
        last = None  # the last dim an integer dropped, kept at size 1 if no dim is left
        for j, k in enumerate(key):
            n = self.shape[j]
            if j == self.axis:
                if not (isinstance(k, slice) and k.indices(n) == (0, n, 1)):
                    raise error(f"dim {j} of this access takes part in its runtime offset; AWS: "
                                "on an indirect view, the selected dimension 'cannot be further "
                                "sliced or selected' (NkiTensor.vector_select / is_indirect); "
                                "slice or select the other dims, or the tensor before placing "
                                "it at run time")
                axis = sum(1 for x in key[:j] if isinstance(x, slice))
                if not self.per_partition:
                    free.append((rows.strides[self._rows_dim(j)], n))
                    axes.append(self.free_axes[j])
                continue
            r = self._rows_dim(j)
            st = rows.strides[r]
            if isinstance(k, slice):
                start, stop, step = _core.static_slice_indices(k, n, f"dim {j}")
                if step <= 0:
                    raise error("slices need a positive step")
                offset += start * st
                free.append((st * step, max(0, (stop - start + step - 1) // step)))
                axes.append(self.free_axes[r - 1])
            elif _core._is_int(k):
                i = int(k) + (n if int(k) < 0 else 0)
                if not 0 <= i < n:
                    raise error(f"index {int(k)} is out of range for dim {j} of size {n}")
                offset += i * st
                last = st
            else:
                raise error(f"index {k!r} is not supported on an access placed at run time: use "
                            "integers and slices")
        if not free and not self.per_partition:
            free, axes = [(last, 1)], [None]  # an HBM view stays at least 1-D
        if any(c == 0 for _, c in free):
            raise error("this view of the access holds no element")
        stride = rows.strides[0]
        n = self.limit
        reach = sum(max(st * (c - 1), 0) for st, c in free)
        if stride > 0:
            n = min(n, (_storage_elements(rows, rows.dtype) - 1 - offset - reach) // stride + 1)
        narrowed = Tensor(rows._buffer, [n] + [c for _, c in free],
                          [stride] + [st for st, _ in free], offset, rows._dtype)
        return IndirectAccess(narrowed, self.index, axes, self.base, self.indexed_dim,
                              self.per_partition, self.count, axis, self.limit)

    def select(self, dim, index):
        """A static select on a dim outside the indirection (the dim dropped, as for an HBM
        tensor); a runtime one is AWS's "no chaining"."""
        d = self._dim(dim, "select")
        if isinstance(index, Tensor) or _core._runtime_index(index):
            return self[(index,)]  # refused there, with AWS's words
        if not _core._is_int(index):
            raise error(f"select(dim={dim}, {index!r}): the index is an integer or a [1, 1] tile")
        return self[(slice(None),) * d + (int(index),)]

    # NkiTensor's own: they ask only ndim, shape and indexing, which this access has.
    slice = Tensor.slice
    _dim = Tensor._dim

    def narrowed(self, bounds):
        """The access restricted to [lo, hi) on each dim that `bounds` (one (lo, hi) or None per
        dim) names: the partition dim narrows the index tile (its other indices are not read)."""
        index, rows = self.index, self.rows
        if index.shape[1] > 1:
            raise error("mask= on an access indexed by a [128, N] tile (AWS's indirect "
                        "dma_transpose form) is not modelled; slice the index tile instead")
        shape, offset = list(rows.shape), rows.offset
        for d, b in enumerate(bounds):
            if b is None:
                continue
            lo, hi = b
            n = self.shape[d]
            lo, hi = max(0, lo), min(hi, n)
            if hi <= lo:
                raise error("mask= keeps no element of this access")
            if d == 0:
                index = Tensor(index._buffer, (hi - lo, 1), index.strides, index.offset
                               + lo * index.strides[0], index._dtype)
            else:
                offset += lo * rows.strides[d]
                shape[d] = hi - lo
        rows = Tensor(rows._buffer, shape, rows.strides, offset, rows._dtype)
        return IndirectAccess(rows, index, self.free_axes, self.base, self.indexed_dim)

    def __repr__(self):
        return f"<indirect access {self.shape} of an HBM tensor, indexed by a tile at run time>"


def index_view(tile, d):
    """The [P, 1] view of an index tile, checked against the rules."""
    from nki import language as _nl  # the memories are defined there; imported late (cycle)
    if not tile._buffer.on_chip or tile.buffer is _nl.psum:
        where = "PSUM" if tile._buffer.on_chip else "HBM"
        raise error(f"dim {d} is indexed by a tile in {where}: the DMA engines read indices from "
                    "SBUF (load them with nl.load, or copy them to SBUF with nl.copy)")
    if tile.dtype.name not in _INDEX_DTYPES:
        raise error(f"dim {d} is indexed by a {tile.dtype.name} tile: indices of an indirect DMA "
                    "are 32-bit integers (nl.int32 / nl.uint32); convert them first, e.g. "
                    "nl.copy(idx, dtype=nl.int32)")
    if tile.numel() != tile.shape[0]:
        raise error(f"dim {d} is indexed by a tile of shape {tile.shape}: an indirect DMA takes "
                    "one index per partition, a [P, 1] tile")
    return Tensor(tile._buffer, (tile.shape[0], 1), (tile.strides[0], 1), tile.offset,
                  tile._dtype)


def _storage_elements(tensor, dtype):
    """Elements of `dtype` the tensor's buffer holds."""
    return tensor._buffer.elements * tensor._buffer.dtype.itemsize // dtype.itemsize


def access_pattern(tensor, pairs, offset, dtype, vector_offset, scalar_offset, indirect_dim,
                   count=None):
    """``tensor.ap(pattern, offset, vector_offset= | scalar_offset=, indirect_dim=)``: `pairs`
    are the pattern's (stride, count) pairs and `offset` the static offset, both in elements of
    `dtype`. `count`: the indices valid along dim `indirect_dim` when fewer than its size (a
    dynamic slice nl.ds(i, n) of a dim of size m stays inside it: i < m - n + 1)."""
    if vector_offset is not None and scalar_offset is not None:
        raise error(".ap: give scalar_offset or vector_offset, not both (one runtime offset per "
                    "access)")
    d = int(indirect_dim)
    if not 0 <= d < tensor.ndim:
        raise error(f".ap: indirect_dim={indirect_dim} is not a dim of the {tensor.ndim}-D tensor "
                    f"{tensor.shape} (the index scales by that dim's stride)")
    if isinstance(tensor.offset, _core.RuntimeOffset):
        raise error("one runtime offset per access: this view is already placed at run time "
                    "(AWS: an indirect view cannot be re-indirected)")
    if tensor._buffer.on_chip and not _is_static_int(scalar_offset):
        return _on_chip_access(tensor, pairs, offset, dtype, vector_offset, scalar_offset, d,
                               count)
    stride = tensor.strides[d] * tensor.dtype.itemsize
    if stride % dtype.itemsize:
        raise error(f".ap: the stride of indirect_dim {d} is not a whole number of {dtype} "
                    "elements")
    stride //= dtype.itemsize
    if vector_offset is not None:
        if not isinstance(vector_offset, Tensor):
            raise error(f".ap: vector_offset must be a [P, 1] SBUF tile of int32 indices, got "
                        f"{type(vector_offset).__name__}")
        free = pairs[1:]
        per_partition = True
        if vector_offset.numel() != vector_offset.shape[0]:
            # AWS's indirect dma_transpose also takes [128, N] index tiles, read column by
            # column; nisa.dma_copy / dma_compute refuse them (_indirect.dma_copy).
            index = _columns_view(vector_offset, d)
            if not 0 < pairs[0][1] <= index.shape[0] * index.shape[1]:
                raise error(f".ap: the pattern's first pair has {pairs[0][1]} rows, the "
                            f"{list(index.shape)} vector_offset names at most "
                            f"{index.shape[0] * index.shape[1]}")
            moved = pairs[0][1]
        else:
            index = index_view(vector_offset, d)
            if pairs[0][1] != index.shape[0]:
                raise error(f".ap: the pattern's first pair has {pairs[0][1]} partitions, the "
                            f"vector_offset {index.shape[0]} indices (one per partition)")
            moved = None
    else:
        if _loops.is_register(scalar_offset) or isinstance(scalar_offset, Tensor):
            index = _scalar_index(scalar_offset, d)
        elif _is_static_int(scalar_offset):
            # A value known when the kernel specialises: an ordinary static offset.
            return Tensor(tensor._buffer, [n for _, n in pairs], [st for st, _ in pairs],
                          offset + int(scalar_offset) * stride, dtype)
        else:
            raise error(f".ap: scalar_offset must be an int, a VirtualRegister or a [1, 1] SBUF "
                        f"tile of an int32 index, got {type(scalar_offset).__name__}")
        free = pairs
        per_partition = False
        moved = None
    # The rows an index may name: dim d whole, less those whose access would leave the tensor.
    allowed = tensor.shape[d] if count is None else min(tensor.shape[d], int(count))
    n = allowed
    reach = sum(max(st * (c - 1), 0) for st, c in free)
    low = sum(min(st * (c - 1), 0) for st, c in free)
    if offset + low < 0:
        raise error(".ap: the pattern reaches before the tensor's first element")
    limit = _storage_elements(tensor, dtype)
    if stride > 0:
        n = min(n, (limit - 1 - offset - reach) // stride + 1)
    if n < 1:
        raise error(f".ap: the pattern {[list(p) for p in pairs]} at offset {offset} leaves the "
                    "tensor even at index 0")
    rows = Tensor(tensor._buffer, [n] + [c for _, c in free], [stride] + [st for st, _ in free],
                  offset, dtype)
    return IndirectAccess(rows, index, [None] * len(free), tensor, d, per_partition, moved,
                          limit=allowed)


def _columns_view(tile, d):
    """The [P, N] view of a 2-D index tile of several columns, checked as index_view checks a
    [P, 1] one."""
    if tile.ndim != 2:
        raise error(f"dim {d} is indexed by a tile of shape {tile.shape}: an index tile is 2-D, "
                    "[P, 1] (or [128, N] for AWS's indirect dma_transpose)")
    index_view(Tensor(tile._buffer, (tile.shape[0], 1), (tile.strides[0], 1), tile.offset,
                      tile._dtype), d)
    return tile


def _scalar_index(scalar_offset, d):
    """The [1, 1] int32 view a scalar offset reads when its instruction runs: a register (a
    device loop's induction value, or one set with nisa.register_*) or a one-element SBUF
    tile."""
    if _loops.is_register(scalar_offset):
        scalar_offset = scalar_offset.read(".ap(scalar_offset=)")
    if scalar_offset.numel() != 1:
        raise error(f".ap: scalar_offset is a tile of shape {scalar_offset.shape}; it holds one "
                    "index ([1, 1]); per-partition indices are vector_offset")
    return index_view(scalar_offset, d)


def _on_chip_access(tensor, pairs, offset, dtype, vector_offset, scalar_offset, d, count):
    """A view of an SBUF / PSUM tensor moved along free dim d by a scalar offset read when the
    instruction that takes it runs: any instruction, compute (Vector, Scalar, GpSimd, Tensor)
    or DMA, on either side (AWS's access patterns are the engines' own, and its migration guide
    replaces tensor_copy_dynamic_src / _dst, SBUF or PSUM at a dynamic offset within each
    partition, by nisa.tensor_copy with .ap(scalar_offset=)). The offset scales by dim d's
    stride; its values are those that keep the access inside the dim (`count`: fewer, for a
    dynamic slice) and inside each partition's row, checked every time the instruction runs."""
    if vector_offset is not None:
        raise error(".ap(vector_offset=...) on an on-chip tensor: AWS's per-partition offsets "
                    "index an HBM tensor only (nisa.dma_copy: 'The tensor being indexed (the one "
                    ".ap() is called on) must be in HBM'; NkiTensor.vector_select: 'Only "
                    "supported on HBM tensors'); an on-chip gather is NkiTensor.indirect, "
                    "nisa.nc_n_gather or nisa.local_gather")
    if d == 0:
        raise error("a runtime offset along the partition dim of an on-chip tensor: AWS refuses "
                    "it (NkiTensor.select: 'Dynamic on-chip: dim must not be 0 (partition "
                    "dim)'; its access-pattern guide: 'on SBUF / PSUM tensors the selected "
                    "dimension must not be the partition dimension'): an engine's access starts "
                    "at a partition fixed in the instruction. Offset a free dim instead, or pick "
                    "rows at run time on the HBM side of nisa.dma_copy")
    if not (_loops.is_register(scalar_offset) or isinstance(scalar_offset, Tensor)):
        raise error(f".ap: scalar_offset must be an int, a VirtualRegister or a [1, 1] SBUF "
                    f"tile of an int32 index, got {type(scalar_offset).__name__}")
    index = _scalar_index(scalar_offset, d)
    stride = tensor.strides[d] * tensor.dtype.itemsize
    if stride % dtype.itemsize:
        raise error(f".ap: the stride of indirect_dim {d} is not a whole number of {dtype} "
                    "elements")
    stride //= dtype.itemsize
    buf = tensor._buffer
    row = buf.elements // buf.shape[0] * buf.dtype.itemsize // dtype.itemsize
    n = tensor.shape[d] if count is None else min(tensor.shape[d], int(count))
    # Inside each partition's row: the free pairs from the access's place in the row.
    free = pairs[1:]
    reach = sum(max(st * (c - 1), 0) for st, c in free)
    low = sum(min(st * (c - 1), 0) for st, c in free)
    at = offset % row
    if at + low < 0 or offset < 0:
        raise error(".ap: the pattern reaches before the start of a partition")
    if stride > 0:
        n = min(n, (row - 1 - at - reach) // stride + 1)
    if n < 1:
        raise error(f"the access {[list(p) for p in pairs]} at offset {offset} leaves the "
                    "partition's row even at runtime index 0")
    return Tensor(buf, [c for _, c in pairs], [st for st, _ in pairs],
                  _core.RuntimeOffset(offset, index, stride, n), dtype)


def refuse_compute(what, *operands):
    """Compute engines read SBUF / PSUM: an HBM access placed at run time is a DMA's side."""
    for x in operands:
        if isinstance(x, IndirectAccess):
            raise error(f"{what} is an HBM tensor placed at run time (a register or index-tile "
                        "offset): compute engines read and write SBUF / PSUM only; move it on "
                        "chip with nisa.dma_copy first (an SBUF / PSUM tile may itself take a "
                        "runtime offset along a free dim)")


def vector_select(tensor, dim, vector_offset):
    """``tensor.vector_select(0, idx)``: partition p of the view is row idx[p] of dim 0."""
    if int(dim) != 0:
        raise error(f"vector_select(dim={dim}): AWS's vector_select indexes dim 0 only")
    pairs = [(tensor.strides[0], vector_offset.shape[0] if isinstance(vector_offset, Tensor)
              else 0)] + list(zip(tensor.strides[1:], tensor.shape[1:]))
    return access_pattern(tensor, pairs, tensor.offset, tensor.dtype, vector_offset, None, 0)


def _is_static_int(x):
    import numbers
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _prod(xs):
    out = 1
    for x in xs:
        out *= int(x)
    return out


def dma_copy(dst, src, what="nisa.dma_copy", skip_oob=False, add=False):
    """A DMA with one indirect side: the other side is a tile (or, for a scalar offset, any
    view) of as many elements. `skip_oob` (oob_mode.skip): an index outside the indexed dim,
    or whose access would run past the tensor, moves nothing, where oob_mode.error stops the
    kernel. `add`: dma_compute's
    read-modify-write, each moved row summed (FP32) into what its destination holds."""
    from nki import language as _nl
    if isinstance(src, IndirectAccess) and isinstance(dst, IndirectAccess):
        raise error(f"{what}: at most one side of a DMA is placed at run time")
    for x in (src, dst):
        if isinstance(x, IndirectAccess) and x.index.shape[1] > 1:
            raise error(f"{what}: a [{x.index.shape[0]}, {x.index.shape[1]}] vector_offset: "
                        "index tiles of several columns are AWS's indirect dma_transpose's "
                        "(its 'DMA Indirect Transpose Constraints'); a gather or scatter takes "
                        "one index per partition, a [P, 1] tile")
    gather = isinstance(src, IndirectAccess)
    access, dense = (src, dst) if gather else (dst, src)
    side = "dst" if gather else "src"
    if not isinstance(dense, Tensor):
        raise error(f"{what}: {side} must be an NKI tensor, got {type(dense).__name__}")
    if dense.buffer is _nl.psum:
        raise error(f"{what}: {side} is in PSUM; DMA moves HBM and SBUF data")
    if access.per_partition:
        if not dense._buffer.on_chip:
            raise error(f"{what}: the other side of a vector_offset DMA is an SBUF tile (the "
                        "DMA engines take one descriptor per partition)")
        if dense.shape[0] != access.shape[0]:
            raise error(f"{what}: {side} has {dense.shape[0]} partitions, the indirect access "
                        f"{access.shape[0]} indices (one per partition)")
    if dense.numel() != _prod(access.shape):
        raise error(f"{what}: {side} {dense.shape} and the indirect access {access.shape} hold "
                    "different numbers of elements")
    tracer = _core.current_tracer()
    # oob_mode.skip: an index the bounds check would stop the kernel for moves nothing (imm0:
    # the indices valid, those inside dim `indexed_dim` whose access stays inside the tensor).
    # AWS's dma_copy: "skip the DMA transfer for a given dynamic address or index when it is
    # out of bound" where oob_mode.error raises; its oob_mode: "Silently skip the runtime
    # out-of-bounds access".
    skip = {"axes": 2, "imm0": float(access.rows.shape[0])} if skip_oob else {"axes": 0}
    axes = skip["axes"] | (8 if add else 0)
    if gather:
        return tracer.emit(OP_DMA_INDIRECT, DMA, dense, access.rows, access.index,
                           axes=axes, imm0=skip.get("imm0", 0.0))
    return tracer.emit(OP_DMA_INDIRECT, DMA, access.rows, dense, access.index,
                       axes=1 | axes, imm0=skip.get("imm0", 0.0))


def _same_access(x, y):
    """Whether two indirect accesses name the same rows by the same index tile."""
    return (isinstance(x, IndirectAccess) and isinstance(y, IndirectAccess)
            and x.rows.same_view(y.rows) and x.index.same_view(y.index)
            and x.per_partition == y.per_partition)


def dma_compute(dst, srcs, what="nisa.dma_compute", skip_oob=False, unique_indices=True):
    """AWS's read-modify-write forms of dma_compute (0.6 stub, "Read-Modify-Write with
    vector_offset"), two sources, one of them an HBM access placed by a vector_offset:
    a scatter, dst(HBM)[idx] = dst(HBM)[idx] + src(SBUF), where dst and one source are the same
    indirect access; a gather, dst(SBUF) = dst(SBUF) + src(HBM)[idx], where the other source is
    dst itself. Either runs as nisa.dma_copy's indirect DMA, adding each row to its
    destination."""
    if len(srcs) != 2:
        raise error(f"{what}: a read-modify-write through a vector_offset takes exactly 2 "
                    f"sources (AWS), got {len(srcs)}")
    if not unique_indices:
        raise error(f"{what}: unique_indices=False: AWS's read-modify-write takes unique "
                    "indices only ('non-unique indices not yet supported'); sum the rows that "
                    "share an index on chip first")
    for x in [dst] + list(srcs):
        if isinstance(x, IndirectAccess) and not x.per_partition:
            raise error(f"{what}: an HBM side placed by a scalar_offset: AWS's dma_compute "
                        "needs compile-time known addresses except through a vector_offset "
                        "(its read-modify-write); move the rows with nisa.dma_copy first")
    if isinstance(dst, IndirectAccess):
        other = [s for s in srcs if not _same_access(s, dst)]
        if len(other) != 1:
            raise error(f"{what}: a scatter read-modify-write (dst an HBM access placed by a "
                        "vector_offset) needs one source that is that same access (the same "
                        ".ap(...) on the same tensor and index tile) and one SBUF tile (AWS)")
        data = other[0]
        if isinstance(data, IndirectAccess) or not isinstance(data, Tensor) or \
                not data._buffer.on_chip:
            raise error(f"{what}: the other source of a scatter read-modify-write is data in "
                        "SBUF (AWS)")
        return dma_copy(dst, data, what=what, skip_oob=skip_oob, add=True)
    rows = [s for s in srcs if isinstance(s, IndirectAccess)]
    if len(rows) != 1:
        raise error(f"{what}: one source at most is an HBM access placed by a vector_offset")
    other = [s for s in srcs if s is not rows[0]][0]
    if not isinstance(dst, Tensor) or not dst._buffer.on_chip:
        raise error(f"{what}: a gather read-modify-write (a source placed by a vector_offset) "
                    "writes an SBUF dst (AWS: dst(SB) = dst(SB) + src(HBM)[indices])")
    if not (isinstance(other, Tensor) and other.same_view(dst)):
        raise error(f"{what}: in a gather read-modify-write the source beside the indirect one "
                    "must be dst itself (AWS: dst(SB) = dst(SB) + src(HBM)[indices]); got a "
                    "different tile: copy it into dst first")
    return dma_copy(dst, rows[0], what=what, skip_oob=skip_oob, add=True)
