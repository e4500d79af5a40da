"""``nki.isa``: the NeuronCore instructions, with NKI 0.6's dst-first signatures.

Each call checks the instruction's engine, buffer and dtype rules and its tile limits for the
NeuronCore version the kernel specialises for, then records the instruction (with the kernel's
source line) for the runtime's interpreter. Errors name the kernel's ``file:line``.
"""

from __future__ import annotations

import enum
import math

from nki import _core
from nki._core import (
    DMA, GPSIMD, OP_ACT, OP_COPY, OP_DMA, OP_IOTA, OP_MATMUL, OP_MEMSET, OP_REDUCE, OP_SELECT,
    OP_TRANSPOSE, OP_TS, OP_TT, PMAX, SCALAR, STATIONARY_FMAX, TENSOR, VECTOR, Tensor, error,
    float32, psum, sbuf,
)


class engine(enum.IntEnum):
    tensor = TENSOR
    vector = VECTOR
    scalar = SCALAR
    gpsimd = GPSIMD
    dma = DMA
    sync = 5
    unknown = 6


class reduce_cmd(enum.Enum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(enum.Enum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.Enum):
    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):
    none = 0
    double_row = 1


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version():
    """The NeuronCore version the current kernel specialises for."""
    return nc_version(_core.current_tracer().spec["version"])


# ---------------------------------------------------------------------------------------------
# rules shared by the instructions


def _tensor(x, what):
    if not isinstance(x, Tensor):
        raise error(f"{what} must be an NKI tensor, got {type(x).__name__}")
    return x


def _on_chip(x, what, op):
    _tensor(x, what)
    if not x._buffer.on_chip:
        raise error(f"{op}: {what} is in HBM; compute engines read and write SBUF/PSUM only: "
                    "move it with nisa.dma_copy / nl.load first")
    return x


def _check_partition_start(x, what, op):
    # Start-partition alignment of the engines' access patterns (trainium_nki.md §1.2): more than
    # 64 partitions start at 0; 33-64 at 0 or 64; up to 32 at 0, 32, 64 or 96.
    if not x._buffer.on_chip:
        return
    start = _partition_of(x)
    n = x.shape[0]
    ok = (start == 0) if n > 64 else (start in (0, 64)) if n > 32 else (start % 32 == 0)
    if not ok:
        raise error(f"{op}: {what} spans {n} partitions starting at partition {start}; engines "
                    "access >64 partitions from 0, 33-64 from 0 or 64, <=32 from a multiple of 32")


def _partition_of(x):
    pstride = x._buffer.elements // x._buffer.shape[0]
    return x.offset // pstride if pstride else 0


def _free(x):
    return math.prod(x.shape[1:])


def _same_elements(dst, src, op, what="src"):
    if dst.shape[0] != src.shape[0] or _free(dst) != _free(src):
        raise error(f"{op}: dst {dst.shape} and {what} {src.shape} differ in partitions or "
                    "elements per partition")


def _engine_reaches(eng, x, op):
    if eng == GPSIMD and x.buffer is psum:
        raise error(f"{op}: the GpSimd engine cannot access PSUM; use the Vector or Scalar engine")


def _operand(value, dst, what, op):
    """A scalar operand (imm) or a [P, 1] tensor broadcast along the free dims."""
    if isinstance(value, Tensor):
        _on_chip(value, what, op)
        if value.shape[0] != dst.shape[0] or _free(value) != 1:
            raise error(f"{op}: {what} must be a scalar or a [{dst.shape[0]}, 1] tensor; got "
                        f"{value.shape}")
        view = Tensor(value._buffer, (dst.shape[0],) + (1,) * (dst.ndim - 1),
                      (value.strides[0],) + (0,) * (dst.ndim - 1), value.offset)
        return view.broadcast_to(dst.shape), 0.0
    if isinstance(value, (int, float, bool)) or hasattr(value, "__float__"):
        return None, float(value)
    raise error(f"{op}: {what} must be a number or a tensor, got {type(value).__name__}")


def _alu(op, what="op"):
    code = getattr(op, "alu", None)
    if code is None:
        raise error(f"{op!r} is not an ALU operation (nl.add, nl.multiply, nl.maximum, ...)")
    return code


def _view_like(x, dst):
    """x viewed with dst's shape (same partitions and elements per partition)."""
    if x.shape == dst.shape:
        return x
    if x.strides == _core._contiguous_strides(x.shape) and dst.shape[0] == x.shape[0]:
        return Tensor(x._buffer, dst.shape, None, x.offset)
    return x


def _pick_engine(eng, default):
    if eng is None or eng == engine.unknown:
        return default
    return int(eng)


# ---------------------------------------------------------------------------------------------
# Tensor engine


def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=None, tile_size=None,
              perf_mode=None):
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] on the Tensor engine, accumulating in
    float32 in PSUM. K (the partition dim of both inputs) <= 128, M <= 128, N <= 512 (4096 on
    NeuronCore-v4). accumulate=None: the first matmul into a PSUM tile overwrites it, the next
    ones accumulate until the tile is read."""
    op = "nc_matmul"
    tracer = _core.current_tracer()
    _tensor(dst, "dst")
    for what, x in (("stationary", stationary), ("moving", moving)):
        _on_chip(x, what, op)
        if x.buffer is not sbuf:
            raise error(f"{op}: {what} must be in SBUF (the Tensor engine reads SBUF), it is in "
                        f"{x.buffer.name}")
        _check_partition_start(x, what, op)
    if is_transpose:
        return nc_transpose(dst, moving, engine=engine.tensor)
    k, m, n = stationary.shape[0], _free(stationary), _free(moving)
    if moving.shape[0] != k:
        raise error(f"{op}: stationary {stationary.shape} and moving {moving.shape} must share the "
                    "contraction (partition) dim")
    if k > PMAX:
        raise error(f"{op}: contraction dim {k} exceeds {PMAX}")
    if m > STATIONARY_FMAX:
        raise error(f"{op}: stationary free size {m} exceeds maximum {STATIONARY_FMAX} "
                    "(nl.tile_size.gemm_stationary_fmax)")
    fmax = tracer.spec["moving_fmax"]
    if tracer.spec["version"] >= 4 and dst.dtype.itemsize == 2:
        fmax = 8192
    if n > fmax:
        raise error(f"{op}: moving free size {n} exceeds maximum {fmax} on NeuronCore-v"
                    f"{tracer.spec['version']} (nl.tile_size.gemm_moving_fmax)")
    s32 = stationary.dtype.code == float32.code
    m32 = moving.dtype.code == float32.code
    if s32 != m32:
        raise error(f"{op}: float32 / tfloat32 inputs must be paired; stationary is "
                    f"{stationary.dtype}, moving {moving.dtype}")
    if not (stationary.dtype.is_float and moving.dtype.is_float):
        raise error(f"{op}: the Tensor engine has no integer data path; got {stationary.dtype} x "
                    f"{moving.dtype}")
    _core.check_psum_dst(dst, stationary.dtype, moving.dtype)
    if dst.shape[0] != m or _free(dst) != n:
        raise error(f"{op}: dst {dst.shape} must be [{m}, {n}] for stationary {stationary.shape} "
                    f"and moving {moving.shape}")
    if accumulate not in (None, True, False):
        raise error(f"{op}: accumulate must be None, True or False")
    index = tracer.emit(OP_MATMUL, TENSOR, dst, stationary, moving, accumulate=accumulate)
    return index


def nc_transpose(dst, data, engine=engine.tensor):
    """dst[F, P] = data[P, F].T: on the Tensor engine (<= 128 x 128, into PSUM, bit-exact) or the
    Vector engine (<= 32 x 32)."""
    op = "nc_transpose"
    tracer = _core.current_tracer()
    _on_chip(data, "data", op)
    _on_chip(dst, "dst", op)
    p, f = data.shape[0], _free(data)
    eng = _pick_engine(engine, TENSOR)
    if eng == TENSOR:
        if p > PMAX or f > PMAX:
            raise error(f"{op}: the Tensor engine transposes up to 128 x 128; data is {data.shape}")
        if data.buffer is not sbuf or dst.buffer is not psum:
            raise error(f"{op}: a Tensor-engine transpose reads SBUF and writes PSUM; data is in "
                        f"{data.buffer.name}, dst in {dst.buffer.name}")
        if dst.dtype.code != data.dtype.code and dst.dtype.code != float32.code:
            raise error(f"{op}: dst dtype {dst.dtype} must be {data.dtype} or float32")
    elif eng == VECTOR:
        if p > 32 or f > 32:
            raise error(f"{op}: the Vector engine transposes up to 32 x 32; data is {data.shape}")
    else:
        raise error(f"{op}: engine must be nisa.engine.tensor or nisa.engine.vector")
    if dst.shape[0] != f or _free(dst) != p:
        raise error(f"{op}: dst {dst.shape} must be [{f}, {p}] for data {data.shape}")
    return tracer.emit(OP_TRANSPOSE, eng, dst, data)


# ---------------------------------------------------------------------------------------------
# Scalar engine


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle):
    """dst = op(data * scale + bias) on the Scalar engine (FP32 inside); scale is a number or a
    [P, 1] tensor, bias a [P, 1] tensor. With reduce_res, also reduce_res[P, 1] = reduce_op over
    the free dims of the result (nl.add by default)."""
    name = "activation"
    tracer = _core.current_tracer()
    _on_chip(data, "data", name)
    _on_chip(dst, "dst", name)
    act = getattr(op, "act", None)
    if act is None:
        raise error(f"{name}: {op!r} is not an activation function (nl.exp, nl.tanh, nl.copy, ...)")
    _same_elements(dst, data, name, "data")
    data = _view_like(data, dst)
    bias_view = None
    if bias is not None:
        bias_view, imm = _operand(bias, dst, "bias", name)
        if bias_view is None:
            raise error(f"{name}: bias must be a [P, 1] tensor (use scale/bias tensors, or "
                        "nisa.tensor_scalar for a constant shift)")
    scale_view, scale_imm = _operand(scale, dst, "scale", name)
    red = None
    alu = 0
    if reduce_res is not None:
        _on_chip(reduce_res, "reduce_res", name)
        if reduce_res.shape[0] != dst.shape[0] or _free(reduce_res) != 1:
            raise error(f"{name}: reduce_res must be [{dst.shape[0]}, 1]; got {reduce_res.shape}")
        red = reduce_res
        from nki import language as nl

        alu = _alu(reduce_op if reduce_op is not None else nl.add)
    return tracer.emit(OP_ACT, SCALAR, dst, data, bias_view, scale_view, red, alu0=alu,
                       imm0=scale_imm, act=act)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0):
    """activation with its free-axis reduction (the same instruction)."""
    return activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                      reduce_res=reduce_res)


# ---------------------------------------------------------------------------------------------
# Vector / GpSimd engines


def tensor_tensor(dst, data1, data2, op, engine=None):
    """dst = data1 op data2, elementwise (FP32 inside). The inputs may not both be in PSUM."""
    name = "tensor_tensor"
    tracer = _core.current_tracer()
    for what, x in (("dst", dst), ("data1", data1), ("data2", data2)):
        _on_chip(x, what, name)
    if data1.buffer is psum and data2.buffer is psum:
        raise error(f"{name}: data1 and data2 cannot both be in PSUM; copy one to SBUF first")
    eng = _pick_engine(engine, VECTOR)
    for what, x in (("dst", dst), ("data1", data1), ("data2", data2)):
        _engine_reaches(eng, x, name)
    _same_elements(dst, data1, name, "data1")
    _same_elements(dst, data2, name, "data2")
    return tracer.emit(OP_TT, eng, dst, _view_like(data1, dst), _view_like(data2, dst),
                       alu0=_alu(op))


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=None):
    """dst = (data op0 operand0) op1 operand1; operands are numbers or [P, 1] tensors;
    reverse swaps an operation's sides."""
    name = "tensor_scalar"
    tracer = _core.current_tracer()
    _on_chip(data, "data", name)
    _on_chip(dst, "dst", name)
    eng = _pick_engine(engine, VECTOR)
    _engine_reaches(eng, dst, name)
    _engine_reaches(eng, data, name)
    _same_elements(dst, data, name, "data")
    v0, i0 = _operand(operand0, dst, "operand0", name)
    v1, i1, a1 = None, 0.0, 0
    if op1 is not None:
        v1, i1 = _operand(operand1, dst, "operand1", name)
        a1 = _alu(op1)
    return tracer.emit(OP_TS, eng, dst, _view_like(data, dst), v0, v1, alu0=_alu(op0), alu1=a1,
                       reverse0=bool(reverse0), reverse1=bool(reverse1), imm0=i0, imm1=i1)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False):
    """dst = reduce op of data over free axes `axis` (never the partition dim)."""
    name = "tensor_reduce"
    tracer = _core.current_tracer()
    _on_chip(data, "data", name)
    _on_chip(dst, "dst", name)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a + data.ndim if a < 0 else a for a in axes)
    if any(a <= 0 or a >= data.ndim for a in axes):
        raise error(f"{name}: axis {axis} of a {data.ndim}-D tensor: only free dims (1..{data.ndim - 1}) "
                    "reduce on an engine; the partition dim needs a transpose first")
    kept = math.prod(n for d, n in enumerate(data.shape) if d not in axes)
    if dst.numel() != kept or dst.shape[0] != data.shape[0]:
        raise error(f"{name}: dst {dst.shape} must hold the {kept} results of reducing "
                    f"{data.shape} over {axes}")
    mask = sum(1 << a for a in axes)
    return tracer.emit(OP_REDUCE, VECTOR, dst, data, alu0=_alu(op), axes=mask, negate=bool(negate))


def tensor_copy(dst, src, engine=None):
    """dst = src, converting dtype (Vector engine by default; Scalar / GpSimd on request)."""
    name = "tensor_copy"
    tracer = _core.current_tracer()
    _on_chip(src, "src", name)
    _on_chip(dst, "dst", name)
    eng = _pick_engine(engine, VECTOR)
    _engine_reaches(eng, dst, name)
    _engine_reaches(eng, src, name)
    _same_elements(dst, src, name)
    return tracer.emit(OP_COPY, eng, dst, _view_like(src, dst))


def memset(dst, value, engine=None):
    """Fills dst with `value`."""
    tracer = _core.current_tracer()
    _tensor(dst, "dst")
    eng = DMA if not dst._buffer.on_chip else _pick_engine(engine, VECTOR)
    _engine_reaches(eng, dst, "memset")
    return tracer.emit(OP_MEMSET, eng, dst, imm0=float(value))


def iota(dst, pattern, offset=0, channel_multiplier=0):
    """dst[p, i...] = offset + p * channel_multiplier + sum(step_k * i_k) on the GpSimd engine,
    pattern = [[step, count], ...] over dst's free dims (int32 arithmetic)."""
    name = "iota"
    tracer = _core.current_tracer()
    _on_chip(dst, "dst", name)
    if dst.buffer is not sbuf:
        raise error(f"{name}: GpSimd writes SBUF only; dst is in {dst.buffer.name}")
    steps = [int(s) for s, _ in pattern]
    counts = [int(c) for _, c in pattern]
    if math.prod(counts) != _free(dst):
        raise error(f"{name}: pattern {pattern} gives {math.prod(counts)} elements per partition, "
                    f"dst has {_free(dst)}")
    if dst.strides != _core._contiguous_strides(dst.shape):
        raise error(f"{name}: dst must be a contiguous tile")
    view = Tensor(dst._buffer, (dst.shape[0],) + tuple(counts), None, dst.offset)
    return tracer.emit(OP_IOTA, GPSIMD, view, imm0=offset, imm1=channel_multiplier,
                       pattern=[0] + steps)


def select(dst, predicate, on_true, on_false, engine=None):
    """dst = predicate != 0 ? on_true : on_false, elementwise."""
    name = "select"
    tracer = _core.current_tracer()
    for what, x in (("dst", dst), ("predicate", predicate), ("on_true", on_true),
                    ("on_false", on_false)):
        _on_chip(x, what, name)
        if x is not dst:
            _same_elements(dst, x, name, what)
    return tracer.emit(OP_SELECT, _pick_engine(engine, VECTOR), dst, _view_like(predicate, dst),
                       _view_like(on_true, dst), _view_like(on_false, dst))


# ---------------------------------------------------------------------------------------------
# DMA


def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             engine=None):
    """dst = src between HBM and SBUF (either direction, or within one), converting dtype through
    float32 as the DMA engines do. PSUM is not a DMA target: copy through SBUF."""
    name = "dma_copy"
    tracer = _core.current_tracer()
    _tensor(dst, "dst")
    _tensor(src, "src")
    for what, x in (("dst", dst), ("src", src)):
        if x.buffer is psum:
            raise error(f"{name}: {what} is in PSUM; DMA moves HBM and SBUF data: copy the PSUM "
                        "tile to SBUF with nisa.tensor_copy first")
    if dst.numel() != src.numel():
        raise error(f"{name}: dst {dst.shape} and src {src.shape} hold different numbers of "
                    "elements")
    return tracer.emit(OP_DMA, DMA, dst, src)
