"""Indirect DMA of the legacy ``neuronxcc.nki`` API: an HBM tensor indexed on one dim by a tile
of values computed or loaded at run time (``data[idx_tile, i_f]``), read by ``nl.load`` (a
gather: partition p of the result is row ``idx_tile[p]``) or written by ``nl.store`` (a scatter:
the value's partition p goes to row ``idx_tile[p]``), as AWS's ``nl.load`` / ``nl.store``
reference pages describe them ("indirect DMA access with dynamic index values").

The rules, as the DMA engines take such a transfer: the index tile is in SBUF, holds 32-bit
integers, one per partition ([P, 1], P <= 128); it indexes exactly one dim of an HBM tensor, and
that dim becomes the transfer's partition dim (one row, one descriptor per index); the other
dims are integers or free index-grid axes known when the kernel specialises. The values are read
when the transfer runs; an index outside the indexed dim is an error there (AWS's DMA raises it
by default, ``oob_mode.error``), naming the partition and the value. ``mask=`` narrows the
partitions (and so which indices are read) as it narrows any access.

NKI 0.6 spells the same transfer ``nisa.dma_copy`` with ``.ap(pattern, offset,
vector_offset=<index tile>, indirect_dim=<the indexed dim>)`` on the HBM side (nki._indirect,
the same interpreter instruction); each use is reported with that spelling, the pattern filled
in.
"""

from __future__ import annotations

from nki import _core
from nki import language as _nl
from nki._core import DMA, OP_DMA_INDIRECT, Tensor, error
from nki._indirect import IndirectAccess, index_view as _index_view
from nki.legacy import report


def index(tensor, key, is_grid):
    """`tensor[key]` where one entry of key is a tile of runtime indices; `is_grid` tells index
    grid expressions (nki.legacy.grids.IndexExpr) apart."""
    tiles = [d for d, k in enumerate(key) if isinstance(k, Tensor)]
    if len(tiles) > 1:
        raise error(f"dims {tiles} are all indexed by tiles: an indirect DMA takes runtime "
                    "indices on one dim (the one that becomes its partition dim)")
    (d_idx,) = tiles
    if tensor._buffer.on_chip:
        raise error(f"an on-chip tile indexed by a tile of runtime values (dim {d_idx}): indirect "
                    "indexing is a DMA from or to HBM (nl.load / nl.store); within SBUF, NKI 0.6 "
                    "takes one index per access along a free dim: t.ap(pattern, offset, "
                    "scalar_offset=<[1, 1] int32 tile>, indirect_dim=d) as any instruction's "
                    "operand")
    if len(key) > tensor.ndim:
        raise error(f"too many indices ({len(key)}) for a tensor of shape {tensor.shape}")
    key = tuple(key) + (slice(None),) * (tensor.ndim - len(key))
    index_view = _index_view(key[d_idx], d_idx)
    has_grid = any(is_grid(k) for k in key)
    offset = tensor.offset
    axes, strides = {}, {}
    sliced = []  # (dim of tensor, count, stride) of slice-indexed dims, in tensor order
    for d, (k, n, st) in enumerate(zip(key, tensor.shape, tensor.strides)):
        if d == d_idx:
            continue
        if is_grid(k):
            lo, hi = k.value_at_zero(), k.value_at_zero()
            for a, c in k.terms.items():
                span = c * (a.count - 1)
                lo, hi = lo + min(0, span), hi + max(0, span)
                axes[a] = a
                strides[a] = strides.get(a, 0) + c * st
            if lo < 0 or hi >= n:
                raise error(f"the index grid on dim {d} reaches {lo}..{hi}, outside its size {n}")
            offset += k.value_at_zero() * st
        elif _core._is_int(k):
            i = int(k) + (n if int(k) < 0 else 0)
            if not 0 <= i < n:
                raise error(f"index {int(k)} is out of range for dim {d} of size {n}")
            offset += i * st
        elif isinstance(k, slice):
            if has_grid and not (k == slice(None) and n == 1):
                raise error("an indirect access mixes index grids and slices: use grids for "
                            "every free dim, or slices for every free dim")
            if k == slice(None) and n == 1:
                continue
            start, stop, step = k.indices(n)
            if step <= 0:
                raise error("slices need a positive step")
            sliced.append((max(0, (stop - start + step - 1) // step), st * step))
            offset += start * st
        else:
            raise error(f"index {k!r} of dim {d} is not supported in an indirect access")
    order = sorted(axes, key=lambda a: a.position)
    if any(a.position == 0 for a in order):
        raise error("the index tile gives the transfer's partition dim: place the other grid "
                    "axes on free dims (nl.arange(n)[None, :])")
    if len({a.position for a in order}) != len(order):
        raise error("two index grid axes share a position: place them with [None, :] at "
                    "different positions")
    free = [(a.count, strides[a]) for a in order] + sliced
    n_rows, row_stride = tensor.shape[d_idx], tensor.strides[d_idx]
    rows = Tensor(tensor._buffer, [n_rows] + [c for c, _ in free],
                  [row_stride] + [s for _, s in free], offset, tensor._dtype)
    free_axes = list(order) + [None] * len(sliced)
    return IndirectAccess(rows, index_view, free_axes, tensor, d_idx)


def _spelling(access, side):
    pattern = [[int(access.rows.strides[0]), access.shape[0]]] + [
        [int(st), int(n)] for st, n in zip(access.rows.strides[1:], access.rows.shape[1:])]
    other = "src=<tile>" if side == "dst" else "dst=<tile>"
    # `<tensor>` is the tensor the kernel indexed: .ap's offset adds to its own, and the index
    # scales by the stride of its dim `indexed_dim`, as NKI 0.6's .ap takes them.
    offset = access.rows.offset - access.base.offset
    return (f"nisa.dma_copy({side}=<tensor>.ap(pattern={pattern}, offset={offset}, "
            f"vector_offset=<index tile>, indirect_dim={access.indexed_dim}), {other}) (the "
            "DMA's own bounds check: oob_mode=nisa.oob_mode.error)")


def gather(access, dtype=None):
    """nl.load of an indirect access: a fresh SBUF tile, partition p holding row index[p]."""
    report.use("nl.load(t[<index tile>, ...]) (indirect DMA gather)", _spelling(access, "src"))
    shape = access.shape if len(access.shape) >= 2 else access.shape + (1,)
    out = _nl.ndarray(shape, dtype or access.dtype, buffer=_nl.sbuf)
    tracer = _core.current_tracer()
    tracer.emit(OP_DMA_INDIRECT, DMA, out, access.rows, access.index, axes=0)
    return out


def scatter(access, value, call="nl.store(t[<index tile>, ...], value)"):
    """nl.store into an indirect access: the value's partition p goes to row index[p]."""
    report.use(f"{call} (indirect DMA scatter)", _spelling(access, "dst"))
    if not isinstance(value, Tensor) or not value._buffer.on_chip:
        raise error("nl.store into an indirect access writes an SBUF tile")
    if value.shape[0] != access.shape[0] or value.numel() != _prod(access.shape):
        raise error(f"nl.store: the value {value.shape} does not match the indirect access "
                    f"{access.shape} (one partition per index)")
    tracer = _core.current_tracer()
    tracer.emit(OP_DMA_INDIRECT, DMA, access.rows, value, access.index, axes=1)


def copy(dst, src):
    """The legacy nisa.dma_copy with an indirect side."""
    if isinstance(src, IndirectAccess) and isinstance(dst, IndirectAccess):
        raise error("nisa.dma_copy: at most one side of a DMA is indexed at run time")
    if isinstance(src, IndirectAccess):
        report.use("nisa.dma_copy(src=t[<index tile>, ...]) (indirect DMA gather)",
                   _spelling(src, "src"))
        if not isinstance(dst, Tensor) or not dst._buffer.on_chip or dst.buffer is _nl.psum:
            raise error("nisa.dma_copy: an indirect gather writes an SBUF tile")
        if dst.shape[0] != src.shape[0] or dst.numel() != _prod(src.shape):
            raise error(f"nisa.dma_copy: dst {dst.shape} does not match the indirect access "
                        f"{src.shape}")
        _core.current_tracer().emit(OP_DMA_INDIRECT, DMA, dst, src.rows, src.index, axes=0)
        return
    scatter(dst, src, "nisa.dma_copy(dst=t[<index tile>, ...])")


def _prod(xs):
    out = 1
    for x in xs:
        out *= int(x)
    return out

