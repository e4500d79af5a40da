"""``neuronxcc.nki.isa`` (the legacy NKI API): instructions that return their result tile
instead of taking ``dst=``, with ``mask=`` and ``dtype=``, on this project's NKI 0.6
instructions. Each call is recorded for the migration report with its NKI 0.6 spelling
(``nisa.<name>(dst=..., ...)``: NKI 0.2 made dst the first, required argument)."""

from __future__ import annotations

from nki import _core
from nki import isa as _isa
from nki import language as _nl
from nki._core import Tensor, error
from nki.isa import (  # noqa: F401  (enums and queries, the same in both APIs)
    dge_mode, engine, get_nc_version, matmul_perf_mode, nc_version, oob_mode, reduce_cmd,
)
from nki.legacy import indirect, report
from nki.legacy.indirect import IndirectAccess
from nki.legacy.grids import IndexExpr, Predicate, masked, skip_masked_off

# Legacy module-level engine names.
tensor_engine, vector_engine, scalar_engine, gpsimd_engine = (
    engine.tensor, engine.vector, engine.scalar, engine.gpsimd)
unknown_engine = engine.unknown


def _used(name):
    report.use(f"nisa.{name}(...) returning its result",
               f"nisa.{name}(dst=<nl.ndarray(...)>, ...): allocate the result and pass it first")


def _fresh(shape, dtype, buffer=_nl.sbuf):
    return _nl.ndarray(tuple(shape), dtype, buffer=buffer)


def _in_sbuf(t, call, operand, engine_name, api="nisa"):
    """`t` where an engine that does not read PSUM can read it: a PSUM tile (a value-returning
    call's result, which the legacy compiler placed itself) is copied to SBUF first, as that
    compiler did; NKI 0.6 asks for the copy in the kernel."""
    if not isinstance(t, Tensor) or t.buffer is not _nl.psum:
        return t
    report.use(f"{api}.{call}({operand}=<a PSUM tile>)",
               f"copy the tile to SBUF first (nisa.tensor_copy): the {engine_name} engine does "
               "not read PSUM")
    staged = _fresh(t.shape, t.dtype)
    _isa.tensor_copy(dst=staged, src=t)
    return staged


def _prep(mask, *tensors):
    if mask is not None:
        report.use("mask=", "clip the slices instead (NKI 0.2 removed mask=)")
    return [masked(t, mask) if isinstance(t, Tensor) else t for t in tensors]


def nc_matmul(stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              mask=None, is_transpose=False, tile_position=None, tile_size=None,
              perf_mode=None, **kwargs):
    _used("nc_matmul")
    stationary, moving = _prep(mask, stationary, moving)
    stationary = _in_sbuf(stationary, "nc_matmul", "stationary", "Tensor")
    moving = _in_sbuf(moving, "nc_matmul", "moving", "Tensor")
    if isinstance(perf_mode, str):
        # The legacy API spelt the performance mode as a string ('double_row_gen3' on
        # NeuronCore-v3); NKI 0.6 takes the enum.
        if perf_mode not in ("double_row", "double_row_gen3", "none"):
            raise error(f"nisa.nc_matmul: perf_mode '{perf_mode}' is not a mode of the legacy "
                        "API ('double_row_gen3' / 'double_row')")
        report.use(f"nisa.nc_matmul(perf_mode='{perf_mode}')",
                   "perf_mode=nisa.matmul_perf_mode.double_row" if perf_mode != "none" else
                   "drop perf_mode")
        perf_mode = None if perf_mode == "none" else matmul_perf_mode.double_row
    if perf_mode is matmul_perf_mode.double_row and stationary.ndim == 3 and moving.ndim == 3:
        shape = (stationary.shape[2], moving.shape[2])  # [K, 2, M] x [K, 2, N] -> [M, N]
    else:
        shape = (_free(stationary), _free(moving))
    out = _fresh(shape, _nl.float32, _nl.psum)
    idx = _isa.nc_matmul(out, stationary, moving, is_transpose=is_transpose,
                         tile_position=tile_position, tile_size=tile_size, perf_mode=perf_mode)
    out._pending_matmul = idx.index
    return out


def _free(t):
    n = 1
    for s in t.shape[1:]:
        n *= s
    return n


def nc_transpose(data, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    _used("nc_transpose")
    (data,) = _prep(mask, data)
    eng = engine if engine != _isa.engine.unknown else (
        _isa.engine.vector if data.shape[0] <= 32 and _free(data) <= 32 else _isa.engine.tensor)
    buf = _nl.psum if eng == _isa.engine.tensor else _nl.sbuf
    out = _fresh((_free(data), data.shape[0]), dtype or data.dtype, buf)
    _isa.nc_transpose(out, data, engine=eng)
    return out


def activation(op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, mask=None, dtype=None, **kwargs):
    _used("activation")
    data, bias, scale, reduce_res = _prep(mask, data, bias, scale, reduce_res)
    out = _fresh(data.shape, dtype or data.dtype)
    _isa.activation(out, op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                    reduce_res=reduce_res, reduce_cmd=reduce_cmd)
    return out


def activation_reduce(op, data, reduce_op, reduce_res, bias=None, scale=1.0, mask=None,
                      dtype=None, **kwargs):
    return activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                      reduce_res=reduce_res, mask=mask, dtype=dtype)


def _broadcast_column(t, like, call, operand):
    """A [P, 1] operand read as `like`'s shape (stride 0 along the free dims), as the legacy
    API's compiler broadcast it (AWS's samples multiply [P, F] tiles by [P, 1] scales with
    nisa.tensor_tensor); NKI 0.6 asks for the broadcast or a tensor_scalar."""
    if (not isinstance(t, Tensor) or not isinstance(like, Tensor) or t.shape[0] != like.shape[0]
            or t.numel() != t.shape[0] or like.numel() == like.shape[0]):
        return t
    report.use(f"nisa.{call}({operand}=<a [P, 1] tile>) broadcast along the free dims",
               f"nisa.tensor_scalar(dst, data, op0, operand0=<the [P, 1] tile>) or "
               f"{operand}.broadcast_to(<the other operand's shape>)")
    return Tensor(t._buffer, like.shape, (t.strides[0],) + (0,) * (like.ndim - 1), t.offset,
                  t._dtype)


def tensor_tensor(data1, data2, op, dtype=None, mask=None, engine=None, **kwargs):
    _used("tensor_tensor")
    data1, data2 = _prep(mask, data1, data2)
    data2 = _broadcast_column(data2, data1, "tensor_tensor", "data2")
    data1 = _broadcast_column(data1, data2, "tensor_tensor", "data1")
    out = _fresh(data1.shape, dtype or _core.result_dtype(data1.dtype, data2.dtype))
    _isa.tensor_tensor(out, data1, data2, op, engine=engine)
    return out


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  dtype=None, mask=None, engine=None, **kwargs):
    _used("tensor_scalar")
    data, operand0, operand1 = _prep(mask, data, operand0, operand1)
    out = _fresh(data.shape, dtype or data.dtype)
    _isa.tensor_scalar(out, data, op0, operand0, reverse0=reverse0, op1=op1, operand1=operand1,
                       reverse1=reverse1, engine=engine)
    return out


def scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         dtype=None, mask=None, **kwargs):
    _used("scalar_tensor_tensor")
    data, operand0, operand1 = _prep(mask, data, operand0, operand1)
    out = _fresh(data.shape, dtype or data.dtype)
    _isa.scalar_tensor_tensor(out, data, op0, operand0, op1, operand1, reverse0=reverse0,
                              reverse1=reverse1)
    return out


def tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None,
                         mask=None, **kwargs):
    _used("tensor_scalar_reduce")
    data, operand0, reduce_res = _prep(mask, data, operand0, reduce_res)
    out = _fresh(data.shape, dtype or data.dtype)
    _isa.tensor_scalar_reduce(out, data, op0, operand0, reduce_op, reduce_res=reduce_res,
                              reverse0=reverse0)
    return out


def tensor_reduce(op, data, axis, mask=None, dtype=None, negate=False, keepdims=False,
                  **kwargs):
    _used("tensor_reduce")
    (data,) = _prep(mask, data)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a + data.ndim if a < 0 else a for a in axes)
    shape = tuple(1 if d in axes else n for d, n in enumerate(data.shape)) if keepdims else \
        tuple(n for d, n in enumerate(data.shape) if d not in axes)
    if len(shape) == 1:
        shape = shape + (1,)
    out = _fresh(shape, dtype or data.dtype)
    _isa.tensor_reduce(out, op, data, axes, negate=negate, keepdims=keepdims)
    return out


def tensor_copy(src, mask=None, dtype=None, engine=None, **kwargs):
    _used("tensor_copy")
    (src,) = _prep(mask, src)
    out = _fresh(src.shape, dtype or src.dtype)
    _isa.tensor_copy(out, src, engine=engine)
    return out


def tensor_copy_dynamic_src(*args, **kwargs):
    raise error("nisa.tensor_copy_dynamic_src (removed in NKI 0.4; its legacy index-grid form "
                "is not modelled here): its NKI 0.6 spelling runs, nisa.tensor_copy(dst, "
                "src=t.ap(pattern, offset, scalar_offset=<[1, 1] int32 tile or register>, "
                "indirect_dim=d)) with d a free dim")


def reciprocal(data, mask=None, dtype=None, **kwargs):
    _used("reciprocal")
    (data,) = _prep(mask, data)
    out = _fresh(data.shape, dtype or data.dtype)
    _isa.reciprocal(out, data)
    return out


def memset(shape, value, dtype, mask=None, engine=None, **kwargs):
    _used("memset")
    out = _fresh(shape, dtype)
    _isa.memset(out, value, engine=engine)
    return out


def iota(expr, dtype, mask=None, **kwargs):
    """The values of an index expression over its grid (GpSimd)."""
    report.use("nisa.iota(<index expression>, dtype)",
               "nisa.iota(dst, pattern=[[step, count], ...], offset=, channel_multiplier=)")
    if not isinstance(expr, IndexExpr):
        raise error("nisa.iota takes an index expression of nl.arange / nl.mgrid axes")
    # The result has one dim per grid position up to the last the expression uses: an axis's
    # count at its position, 1 where the expression has no axis (it broadcasts there, as
    # NumPy's broadcasting of the grid axes would). 3 * g.y + g.z over nl.mgrid[0:P, 0:W, 0:3,
    # 0:3] is a (1, 1, 3, 3) tile.
    by_pos = {}
    for a in expr.terms:
        if a.position in by_pos:
            raise error("nisa.iota: two grid axes of the expression share a position")
        by_pos[a.position] = a
    ndim = max(2, max(by_pos, default=0) + 1)
    part = by_pos.get(0)
    shape = tuple((by_pos[d].count if d in by_pos else 1) for d in range(ndim))
    out = _fresh(shape, dtype)
    pattern = [[expr.terms[by_pos[d]] if d in by_pos else 0, shape[d]] for d in range(1, ndim)]
    _isa.iota(out, pattern, offset=expr.value_at_zero(),
              channel_multiplier=expr.terms[part] if part else 0)
    return out


def affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None, **kwargs):
    """pred: a comparison of an affine index expression (e.g. i_p - i_f >= 0)."""
    report.use("nisa.affine_select(pred=<comparison of index expressions>, ...)",
               "nisa.affine_select(dst, pattern=[[step, count], ...], channel_multiplier=, "
               "on_true_tile=, on_false_value=, cmp_op=, offset=)")
    if not isinstance(pred, Predicate) or len(pred.conditions) != 1:
        raise error("nisa.affine_select takes one comparison of an index expression")
    expr, op = pred.conditions[0]
    (on_true_tile,) = _prep(mask, on_true_tile)
    on_true_tile = _in_sbuf(on_true_tile, "affine_select", "on_true_tile", "GpSimd")
    from nki.language import greater, greater_equal, less, less_equal

    cmp = {"lt": less, "le": less_equal, "gt": greater, "ge": greater_equal}[op.__name__]
    axes = sorted(expr.terms, key=lambda a: a.position)
    part = [a for a in axes if a.position == 0]
    free = [a for a in axes if a.position != 0]
    out = _fresh(on_true_tile.shape, dtype or on_true_tile.dtype)
    counts = [a.count for a in free]
    if not free or _free(on_true_tile) != _prod(counts):
        pattern = [[expr.terms.get(a, 0), a.count] for a in free] if free else [[0, _free(out)]]
    else:
        pattern = [[expr.terms[a], a.count] for a in free]
    _isa.affine_select(out, pattern, expr.terms[part[0]] if part else 0, on_true_tile,
                       on_false_value, cmp_op=cmp, offset=expr.value_at_zero())
    return out


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


def bn_stats(data, mask=None, dtype=None, **kwargs):
    _used("bn_stats")
    (data,) = _prep(mask, data)
    out = _fresh((data.shape[0], 6), dtype or data.dtype)
    _isa.bn_stats(out, data)
    return out


def bn_aggr(data, mask=None, dtype=None, **kwargs):
    _used("bn_aggr")
    (data,) = _prep(mask, data)
    out = _fresh((data.shape[0], 2), dtype or data.dtype)
    _isa.bn_aggr(out, data)
    return out


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False,
                       dtype=None, mask=None, **kwargs):
    _used("tensor_tensor_scan")
    data0, data1, initial = _prep(mask, data0, data1, initial)
    out = _fresh(data0.shape, dtype or data0.dtype)
    _isa.tensor_tensor_scan(out, data0, data1, initial, op0, op1, reverse0=reverse0,
                            reverse1=reverse1)
    return out


def tensor_partition_reduce(op, data, mask=None, dtype=None, **kwargs):
    _used("tensor_partition_reduce")
    (data,) = _prep(mask, data)
    out = _fresh((1,) + tuple(data.shape[1:]), dtype or data.dtype)
    _isa.tensor_partition_reduce(out, op, data)
    return out


def max8(src, mask=None, dtype=None, **kwargs):
    _used("max8")
    (src,) = _prep(mask, src)
    out = _fresh((src.shape[0], 8), dtype or src.dtype)
    _isa.max8(out, src)
    return out


def nc_find_index8(data, vals, mask=None, dtype=None, **kwargs):
    _used("nc_find_index8")
    (data,) = _prep(mask, data)
    out = _fresh((data.shape[0], 8), dtype or _nl.uint32)
    _isa.nc_find_index8(out, data, vals)
    return out


def nc_match_replace8(data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    _used("nc_match_replace8")
    (data,) = _prep(mask, data)
    out = _fresh(data.shape, dtype or data.dtype)
    _isa.nc_match_replace8(out, data, vals, imm, dst_idx=dst_idx)
    return out


def dma_transpose(src, axes=None, mask=None, dtype=None, **kwargs):
    _used("dma_transpose")
    (src,) = _prep(mask, src)
    axes = tuple(axes) if axes is not None else tuple(reversed(range(src.ndim)))
    out = _fresh(tuple(src.shape[a] for a in axes), dtype or src.dtype)
    _isa.dma_transpose(out, src, axes=axes)
    return out


def select(predicate, on_true, on_false, mask=None, dtype=None, **kwargs):
    _used("select")
    predicate, on_true, on_false = _prep(mask, predicate, on_true, on_false)
    out = _fresh(on_true.shape, dtype or on_true.dtype)
    _isa.select(out, predicate, on_true, on_false)
    return out


def dma_copy(dst=None, src=None, mask=None, dst_rmw_op=None, oob_mode=None, dge_mode=None,
             **kwargs):
    if dst_rmw_op is not None:
        raise error("nisa.dma_copy(dst_rmw_op=) (read-modify-write DMA) is not modelled; NKI "
                    "0.3 moved it to nisa.dma_compute")
    if isinstance(dst, IndirectAccess) or isinstance(src, IndirectAccess):
        if mask is not None:
            report.use("mask=", "clip the slices instead (NKI 0.2 removed mask=)")
        return indirect.copy(masked(dst, mask), masked(src, mask))
    dst, src = _prep(mask, dst, src)
    return _isa.dma_copy(dst=dst, src=src)


# The selection and gather instructions AWS documented for the legacy API (Neuron SDK 2.24-2.26):
# sequence_bounds, range_select and local_gather return their result; select_reduce,
# tensor_scalar_cumulative and nc_stream_shuffle already took dst.


def sequence_bounds(segment_ids, dtype=None, mask=None, **kwargs):
    _used("sequence_bounds")
    (segment_ids,) = _prep(mask, segment_ids)
    out = _fresh((segment_ids.shape[0], 2) + tuple(segment_ids.shape[1:]),
                 dtype or segment_ids.dtype)
    _isa.sequence_bounds(out, segment_ids)
    return out


def range_select(on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=reduce_cmd.reset_reduce, reduce_res=None, reduce_op=None,
                 range_start=0, on_false_value=_isa.FP32_MIN, mask=None, dtype=None, **kwargs):
    _used("range_select")
    on_true_tile, bound0, bound1 = _prep(mask, on_true_tile, bound0, bound1)
    out = _fresh(on_true_tile.shape, dtype or on_true_tile.dtype)
    _isa.range_select(out, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                      reduce_cmd=reduce_cmd, reduce_res=reduce_res, reduce_op=reduce_op,
                      range_start=range_start, on_false_value=on_false_value)
    return out


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, mask=None,
                 **kwargs):
    _used("local_gather")
    src_buffer, index = _prep(mask, src_buffer, index)
    valid = num_valid_indices if num_valid_indices is not None else 16 * _free(index)
    out = _fresh((src_buffer.shape[0], int(valid) * num_elem_per_idx), src_buffer.dtype)
    _isa.local_gather(out, src_buffer, index, num_elem_per_idx=num_elem_per_idx,
                      num_valid_indices=num_valid_indices)
    return out


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=None, reverse_pred=False, mask=None, dtype=None, **kwargs):
    dst, predicate, on_true = _prep(mask, dst, predicate, on_true)
    return _isa.select_reduce(dst, predicate, on_true, on_false, reduce_res=reduce_res,
                              reduce_cmd=reduce_cmd, reduce_op=reduce_op,
                              reverse_pred=reverse_pred)


def tensor_scalar_cumulative(src, dst, op0, op1, imm0, imm1=None,
                             reduce_cmd=reduce_cmd.reset_reduce, mask=None, **kwargs):
    dst, src = _prep(mask, dst, src)
    return _isa.tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=imm1,
                                         reduce_cmd=reduce_cmd)


def nc_stream_shuffle(src, dst, shuffle_mask, mask=None, dtype=None, **kwargs):
    dst, src = _prep(mask, dst, src)
    return _isa.nc_stream_shuffle(dst, src, shuffle_mask)


# mask=False (a comparison of unrolled loop variables that is false) turns an instruction off.
for _name, _fn in list(globals().items()):
    if (callable(_fn) and not _name.startswith("_") and getattr(_fn, "__module__", None) == __name__
            and not isinstance(_fn, type)):
        globals()[_name] = skip_masked_off(_fn)
del _name, _fn
