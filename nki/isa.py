"""``nki.isa``: the NeuronCore instructions, with NKI 0.6's dst-first signatures.

Each call checks the instruction's engine, buffer and dtype rules and its tile limits for the
NeuronCore version the kernel specialises for, then records the instruction (with the kernel's
source line) for the runtime's interpreter. Errors name the kernel's ``file:line``.
"""

from __future__ import annotations

import enum
import math

from nki import _core, _indirect, _loops, _ops
from nki._core import (
    DMA, GPSIMD, OP_ACT, OP_BARRIER, OP_COPY, OP_DMA, OP_IOTA, OP_MATMUL, OP_MEMSET, OP_REDUCE, OP_SELECT,
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


# The enum under a second name, for functions whose reduce_cmd parameter hides it.
_ReduceCmd = reduce_cmd


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


# Deprecated aliases of the engine enum's members (NKI 0.6 keeps them).
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


class dma_engine(enum.Enum):
    dma = 1
    gpsimd_dma = 2


def get_nc_version():
    """The NeuronCore version the current kernel specialises for."""
    return nc_version(_core.current_tracer().spec["version"])


def get_nc_sub_version():
    """The NeuronCore sub-version (0: the base part of each generation, the only one modelled)."""
    _core.current_tracer()
    return 0


class NkiValidationError(_core.NkiError):
    """An instruction broke a rule of the NeuronCore (the interpreter raises NkiError)."""


class NkiInstruction(_core.NKIObject):
    """The handle an nki.isa call returns: ``depends_on(*producers)`` makes it wait for other
    instructions beyond the data dependencies the compiler finds (the timeline honours it)."""

    def __init__(self, index):
        self.index = index

    def depends_on(self, *producers):
        tracer = _core.current_tracer()
        ins = tracer.instructions[self.index]
        for p in producers:
            if not isinstance(p, NkiInstruction):
                raise error(f"depends_on takes instructions returned by nki.isa calls, got "
                            f"{type(p).__name__}")
            if p.index >= self.index:
                raise error("depends_on: an instruction can only wait for earlier ones (program "
                            "order)")
            ins.after.append(p.index)
        return self

    def __repr__(self):
        return f"NkiInstruction({self.index})"


def _emit(tracer, name, op, engine, *views, **params):
    if name is not None and not isinstance(name, str):
        raise error(f"name= must be a string, got {type(name).__name__}")
    return NkiInstruction(tracer.emit(op, engine, *views, name=name, **params))


# Registers (runtime 32-bit values) and their instructions: nki._loops.
VirtualRegister = _loops.VirtualRegister


# ---------------------------------------------------------------------------------------------
# rules shared by the instructions


def _tensor(x, what):
    _indirect.refuse_compute(what, x)
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
    if value is None:
        return None, 0.0  # a unary op0 (nl.abs) takes no operand
    if isinstance(value, (int, float, bool)) or hasattr(value, "__float__"):
        return None, float(value)
    raise error(f"{op}: {what} must be a number or a tensor, got {type(value).__name__}")


def _alu(op, what="op"):
    code = getattr(_ops.resolve(op), "alu", None)
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
              perf_mode=None, name=None):
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
    double_row = _double_row(perf_mode, tracer, stationary, moving, is_transpose, tile_size, op)
    k, m, n = stationary.shape[0], _free(stationary), _free(moving)
    if double_row:
        m, n = m // 2, n // 2
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
    if is_transpose and dst.dtype == stationary.dtype and dst.buffer is psum:
        # Transpose mode (moving = identity): the stationary's values pass through bit-exactly,
        # so a 16-bit PSUM result is allowed on every version.
        pass
    else:
        _core.check_psum_dst(dst, stationary.dtype, moving.dtype)
    if dst.shape[0] != m or _free(dst) != n:
        raise error(f"{op}: dst {dst.shape} must be [{m}, {n}] for stationary {stationary.shape} "
                    f"and moving {moving.shape}")
    if accumulate not in (None, True, False):
        raise error(f"{op}: accumulate must be None, True or False")
    tile = _pe_tile(tracer, tile_position, tile_size, k, m, op)
    index = _emit(tracer, name, OP_MATMUL, TENSOR, dst, stationary, moving, accumulate=accumulate,
                  axes=1 if double_row else 0, pattern=tile)
    return index


def _pe_tile(tracer, tile_position, tile_size, k, m, op):
    """The part of the 128 x 128 PE array a matmul uses (AWS's nc_matmul stub, "Tiling mode"):
    rows (the contraction, stationary's partitions) and columns (stationary's free size) split
    into tiles of 64 (NeuronCore-v2 and newer) or 32 (v3 and newer); tile_position (start_row,
    start_column) a multiple of the tile's size. Matmuls on disjoint tiles run at the same time
    (the timeline, Timeline.cpp). [start_row, row_size, start_column, column_size], or [] for
    the whole array (neither given)."""
    given = [x is not None and len(tuple(x)) > 0 for x in (tile_position, tile_size)]
    if not any(given):
        return []
    if not all(given):
        raise error(f"{op}: tile_position and tile_size are set together (AWS: both must be set "
                    f"to enable tiling mode); got tile_position={tile_position!r}, "
                    f"tile_size={tile_size!r}")
    values = []
    for what, x in (("tile_position", tile_position), ("tile_size", tile_size)):
        x = tuple(x)
        if len(x) != 2 or not all(_core._is_int(v) for v in x):
            raise error(f"{op}: {what} is a pair of integers known when the kernel specialises "
                        f"((row, column)); got {x!r}")
        values.append([int(v) for v in x])
    (row0, col0), (rows, cols) = values
    smallest = 32 if tracer.spec["version"] >= 3 else 64
    for what, size, start in (("row", rows, row0), ("column", cols, col0)):
        sizes = [s for s in (32, 64, PMAX) if s >= smallest]
        if size not in sizes:
            raise error(f"{op}: a {what} tile of {size}: the PE array's {what}s split into tiles "
                        f"of {sizes} on NeuronCore-v{tracer.spec['version']} (32 from v3)")
        if start % size or not 0 <= start < PMAX:
            raise error(f"{op}: a {what} tile of {size} starts at a multiple of {size} below "
                        f"{PMAX}; tile_position gives {start}")
    if k > rows or m > cols:
        raise error(f"{op}: the stationary tile ({k} partitions x {m}) exceeds tile_size "
                    f"({rows}, {cols}) (AWS: it must not)")
    return [row0, rows, col0, cols]


_FP8 = ("float8_e4m3", "float8_e4m3fn", "float8_e5m2")


def _double_row(perf_mode, tracer, stationary, moving, is_transpose, tile_size, op):
    """Whether nc_matmul runs in FP8 double-row mode, with its rules (AWS's Trainium2
    architecture guide): NeuronCore-v3 or newer; FP8 (e4m3 / e5m2) operands [K, 2, M] and
    [K, 2, N] whose most major free dim is the two halves of a contraction of 2K; not with
    transpose mode or column tiling."""
    if perf_mode in (None, matmul_perf_mode.none):
        return False
    if perf_mode is not matmul_perf_mode.double_row:
        raise error(f"{op}: perf_mode {perf_mode!r} is not a nki.isa.matmul_perf_mode")
    version = tracer.spec["version"]
    if version < 3:
        raise error(f"{op}: perf_mode=double_row needs NeuronCore-v3 or newer; this kernel "
                    f"specialises for NeuronCore-v{version}")
    for what, x in (("stationary", stationary), ("moving", moving)):
        if x.dtype.name not in _FP8:
            raise error(f"{op}: perf_mode=double_row multiplies FP8 (float8_e4m3 / float8_e5m2) "
                        f"inputs; {what} is {x.dtype}")
        if x.ndim != 3 or x.shape[1] != 2:
            raise error(f"{op}: perf_mode=double_row takes {what} as [K, 2, "
                        f"{'M' if what == 'stationary' else 'N'}] (the two halves of the "
                        f"contraction on its most major free dim); got {x.shape}: pad an odd "
                        "contraction with zeros")
    if is_transpose:
        raise error(f"{op}: perf_mode=double_row cannot be combined with transpose mode")
    if tile_size and len(tile_size) == 2 and tile_size[1] < PMAX:
        raise error(f"{op}: perf_mode=double_row cannot be combined with column tiling "
                    f"(tile_size={tuple(tile_size)})")
    return True


def nc_transpose(dst, data, engine=engine.tensor, name=None):
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
    return _emit(tracer, name, OP_TRANSPOSE, eng, dst, data)


# ---------------------------------------------------------------------------------------------
# Scalar engine


def _reduction(tracer, eng, dst, reduce_op, reduce_res, cmd, init=None, negate=False,
               op="reduce"):
    """The views and parameters of an instruction's free-dim reduction into `eng`'s accumulator
    registers (reduce_cmd carries them between instructions), written out to reduce_res."""
    cmd = reduce_cmd(cmd) if not isinstance(cmd, reduce_cmd) else cmd
    if reduce_res is None and cmd == reduce_cmd.idle:
        return {}
    if reduce_op is None:
        reduce_op = _ops.add
    if reduce_res is not None:
        _on_chip(reduce_res, "reduce_res", op)
        if reduce_res.shape[0] != dst.shape[0] or _free(reduce_res) != 1:
            raise error(f"{op}: reduce_res must be [{dst.shape[0]}, 1]; got {reduce_res.shape}")
    out = dict(d=reduce_res, e=tracer.accumulator(eng), alu2=_alu(reduce_op),
               reduce_cmd=cmd.value, negate=bool(negate))
    if cmd == reduce_cmd.load_reduce:
        if init is None:
            raise error(f"{op}: reduce_cmd.load_reduce needs reduce_init")
        if isinstance(init, Tensor):
            _on_chip(init, "reduce_init", op)
            out["f"] = init
        else:
            out["imm2"] = float(init)
    return out


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, name=None):
    """dst = op(data * scale + bias) on the Scalar engine (FP32 inside); scale is a number or a
    [P, 1] tensor, bias a number or a [P, 1] tensor. With reduce_res, also reduce_res[P, 1] =
    reduce_op over the free dims of the result (nl.add by default), through the engine's
    accumulators (reduce_cmd)."""
    label, name = name, "activation"
    tracer = _core.current_tracer()
    _on_chip(data, "data", name)
    _on_chip(dst, "dst", name)
    act = getattr(_ops.resolve(op), "act", None)
    if act is None:
        raise error(f"{name}: {op!r} is not an activation function (nl.exp, nl.tanh, nl.copy, ...)")
    if act == _ops.prelu.act:
        raise error(f"{name}: nl.prelu takes its slope from relu_param, which nisa.activation "
                    "does not have; use nisa.activate2(op=nl.prelu, relu_param=...)")
    _same_elements(dst, data, name, "data")
    data = _view_like(data, dst)
    bias_view, bias_imm = (None, 0.0) if bias is None else _operand(bias, dst, "bias", name)
    scale_view, scale_imm = _operand(scale, dst, "scale", name)
    red = _reduction(tracer, SCALAR, dst, reduce_op, reduce_res, reduce_cmd, op=name)
    if red:
        red["negate"] = False
    return _emit(tracer, label, OP_ACT, SCALAR, dst, data, bias_view, scale_view,
                 imm0=scale_imm, imm1=bias_imm, act=act, **red)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """activation with its free-axis reduction (the same instruction)."""
    return activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                      reduce_res=reduce_res, name=name)


# ---------------------------------------------------------------------------------------------
# Vector / GpSimd engines


def tensor_tensor(dst, data1, data2, op, engine=None, name=None):
    """dst = data1 op data2, elementwise (FP32 inside). The inputs may not both be in PSUM."""
    label, name = name, "tensor_tensor"
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
    return _emit(tracer, label, OP_TT, eng, dst, _view_like(data1, dst), _view_like(data2, dst),
                       alu0=_alu(op))


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=None, name=None):
    """dst = (data op0 operand0) op1 operand1; operands are numbers or [P, 1] tensors;
    reverse swaps an operation's sides."""
    return _tensor_scalar("tensor_scalar", dst, data, op0, operand0, reverse0, op1, operand1,
                          reverse1, engine, name)


def _tensor_scalar(what, dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                   reverse1=False, engine=None, name=None, full_operand1=False, **reduce):
    tracer = _core.current_tracer()
    _on_chip(data, "data", what)
    _on_chip(dst, "dst", what)
    eng = _pick_engine(engine, VECTOR)
    _engine_reaches(eng, dst, what)
    _engine_reaches(eng, data, what)
    _same_elements(dst, data, what, "data")
    v0, i0 = _operand(operand0, dst, "operand0", what)
    v1, i1, a1 = None, 0.0, 0
    if op1 is not None:
        if full_operand1:
            _on_chip(operand1, "operand1", what)
            _same_elements(dst, operand1, what, "operand1")
            if data.buffer is psum and operand1.buffer is psum:
                raise error(f"{what}: data and operand1 cannot both be in PSUM")
            v1 = _view_like(operand1, dst)
        else:
            v1, i1 = _operand(operand1, dst, "operand1", what)
        a1 = _alu(op1)
    red = {}
    if reduce:
        red = _reduction(tracer, eng, dst, reduce["reduce_op"], reduce["reduce_res"],
                         reduce["reduce_cmd"], reduce.get("reduce_init"),
                         reduce.get("negate", False), op=what)
    return _emit(tracer, name, OP_TS, eng, dst, _view_like(data, dst), v0, v1, alu0=_alu(op0),
                 alu1=a1, reverse0=bool(reverse0), reverse1=bool(reverse1), imm0=i0, imm1=i1,
                 **red)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         name=None):
    """dst = (data op0 operand0) op1 operand1 on the Vector engine: operand0 a number or a
    [P, 1] tensor, operand1 a tile of data's shape (one instruction, tensor_tensor's cost)."""
    return _tensor_scalar("scalar_tensor_tensor", dst, data, op0, operand0, reverse0, op1,
                          operand1, reverse1, None, name, full_operand1=True)


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None,
                         reduce_res_negate=False, name=None):
    """dst = data op0 operand0, and its free-dim reduction (reduce_op) through the Vector
    engine's accumulators into reduce_res [P, 1] (negated with reduce_res_negate)."""
    return _tensor_scalar("tensor_scalar_reduce", dst, data, op0, operand0, reverse0, None, None,
                          False, None, name, reduce_op=reduce_op, reduce_res=reduce_res,
                          reduce_cmd=reduce_cmd, reduce_init=reduce_init,
                          negate=reduce_res_negate)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """dst = reduce op of data over free axes `axis` (never the partition dim)."""
    label, name = name, "tensor_reduce"
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
    return _emit(tracer, label, OP_REDUCE, VECTOR, dst, data, alu0=_alu(op), axes=mask, negate=bool(negate))


def tensor_copy(dst, src, engine=None, name=None):
    """dst = src, converting dtype (Vector engine by default; Scalar / GpSimd on request)."""
    label, name = name, "tensor_copy"
    tracer = _core.current_tracer()
    _on_chip(src, "src", name)
    _on_chip(dst, "dst", name)
    eng = _pick_engine(engine, VECTOR)
    _engine_reaches(eng, dst, name)
    _engine_reaches(eng, src, name)
    _same_elements(dst, src, name)
    return _emit(tracer, label, OP_COPY, eng, dst, _view_like(src, dst))


def memset(dst, value, engine=None, name=None):
    """Fills dst with `value`."""
    tracer = _core.current_tracer()
    _tensor(dst, "dst")
    eng = DMA if not dst._buffer.on_chip else _pick_engine(engine, VECTOR)
    _engine_reaches(eng, dst, "memset")
    return _emit(tracer, name, OP_MEMSET, eng, dst, imm0=float(value))


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """dst[p, i...] = offset + p * channel_multiplier + sum(step_k * i_k) on the GpSimd engine,
    pattern = [[step, count], ...] over dst's free dims (int32 arithmetic)."""
    label, name = name, "iota"
    tracer = _core.current_tracer()
    _on_chip(dst, "dst", name)
    if dst.buffer is not sbuf:
        raise error(f"{name}: GpSimd writes SBUF only; dst is in {dst.buffer.name}")
    steps = [int(s) for s, _ in pattern]
    counts = [int(c) for _, c in pattern]
    if math.prod(counts) != _free(dst):
        raise error(f"{name}: pattern {pattern} gives {math.prod(counts)} elements per partition, "
                    f"dst has {_free(dst)}")
    # Any partition stride (a column block of a wider tile, t[:, a:b]); the free elements of a
    # partition dense, as the pattern walks them.
    if dst.strides[1:] != _core._contiguous_strides(dst.shape[1:]):
        raise error(f"{name}: dst's free elements must be contiguous in each partition")
    view = Tensor(dst._buffer, (dst.shape[0],) + tuple(counts),
                  (dst.strides[0],) + _core._contiguous_strides(tuple(counts)), dst.offset,
                  dst._dtype)
    return _emit(tracer, label, OP_IOTA, GPSIMD, view, imm0=offset, imm1=channel_multiplier,
                       pattern=[0] + steps)


def select(dst, predicate, on_true, on_false, engine=None, name=None):
    """dst = predicate != 0 ? on_true : on_false, elementwise."""
    label, name = name, "select"
    tracer = _core.current_tracer()
    for what, x in (("dst", dst), ("predicate", predicate), ("on_true", on_true),
                    ("on_false", on_false)):
        _on_chip(x, what, name)
        if x is not dst:
            _same_elements(dst, x, name, what)
    return _emit(tracer, label, OP_SELECT, _pick_engine(engine, VECTOR), dst, _view_like(predicate, dst),
                       _view_like(on_true, dst), _view_like(on_false, dst))


# ---------------------------------------------------------------------------------------------
# DMA


def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             engine=None, name=None):
    """dst = src between HBM and SBUF (either direction, or within one), converting dtype through
    float32 as the DMA engines do. PSUM is not a DMA target: copy through SBUF."""
    label, name = name, "dma_copy"
    tracer = _core.current_tracer()
    mode = getattr(oob_mode, "name", oob_mode)
    if mode not in ("error", "skip"):
        raise error(f"{name}: oob_mode={oob_mode!r} is not an nisa.oob_mode")
    if isinstance(dst, _indirect.IndirectAccess) or isinstance(src, _indirect.IndirectAccess):
        index = _indirect.dma_copy(dst, src, what=name, skip_oob=mode == "skip")
        # oob_mode.skip covers an SBUF side placed at run time too: out of range, nothing moves.
        tracer.instructions[index].skip_oob = mode == "skip"
        return NkiInstruction(index)
    _tensor(dst, "dst")
    _tensor(src, "src")
    for what, x in (("dst", dst), ("src", src)):
        if x.buffer is psum:
            raise error(f"{name}: {what} is in PSUM; DMA moves HBM and SBUF data: copy the PSUM "
                        "tile to SBUF with nisa.tensor_copy first")
    if dst.numel() != src.numel():
        raise error(f"{name}: dst {dst.shape} and src {src.shape} hold different numbers of "
                    "elements")
    ins = _emit(tracer, label, OP_DMA, DMA, dst, src)
    tracer.instructions[ins.index].skip_oob = mode == "skip"
    return ins


# ---------------------------------------------------------------------------------------------
# Vector / GpSimd instructions beyond elementwise arithmetic


def _ops_of(*ops):
    return [_alu(o) for o in ops]


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False,
                       name=None):
    """Per partition, along the free dims: s = (data0[i] op0 s) op1 data1[i]; dst[i] = s, with s
    starting at `initial` (a number or a [P, 1] tile). Vector engine, FP32 inside."""
    what = "tensor_tensor_scan"
    tracer = _core.current_tracer()
    for w, x in (("dst", dst), ("data0", data0), ("data1", data1)):
        _on_chip(x, w, what)
    if data0.buffer is psum and data1.buffer is psum:
        raise error(f"{what}: data0 and data1 cannot both be in PSUM")
    _same_elements(dst, data0, what, "data0")
    _same_elements(dst, data1, what, "data1")
    init_view, init_imm = _operand(initial, dst, "initial", what)
    if init_view is not None:
        init_view = Tensor(initial._buffer, (dst.shape[0], 1), (initial.strides[0], 0),
                           initial.offset, initial._dtype)
    a0, a1 = _ops_of(op0, op1)
    return _emit(tracer, name, _core.OP_SCAN, VECTOR, dst, _view_like(data0, dst),
                 _view_like(data1, dst), init_view, alu0=a0, alu1=a1, imm2=init_imm,
                 reverse0=bool(reverse0), reverse1=bool(reverse1))


def tensor_partition_reduce(dst, op, data, name=None):
    """dst[0, ...] = op over the partitions of data (nl.add, nl.maximum, nl.minimum,
    nl.bitwise_or / bitwise_and, or nl.average) on the GpSimd engine."""
    what = "tensor_partition_reduce"
    tracer = _core.current_tracer()
    _on_chip(data, "data", what)
    _on_chip(dst, "dst", what)
    if dst.buffer is psum or data.buffer is psum:
        raise error(f"{what}: the GpSimd engine cannot access PSUM")
    if dst.shape[0] != 1 or _free(dst) != _free(data):
        raise error(f"{what}: dst must be [1, {_free(data)}] for data {data.shape}; got "
                    f"{dst.shape}")
    average = getattr(op, "name", "") == "average"
    code = 1 if average else _alu(op)
    return _emit(tracer, name, _core.OP_PARTITION_REDUCE, GPSIMD, dst, data, alu0=code,
                 axes=1 if average else 0)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None,
                  offset=0, name=None):
    """dst = cmp_op(offset + p * channel_multiplier + sum(step_k * i_k), 0) ? on_true_tile :
    on_false_value, elementwise on the GpSimd engine (a causal mask in one instruction)."""
    what = "affine_select"
    tracer = _core.current_tracer()
    _on_chip(dst, "dst", what)
    _on_chip(on_true_tile, "on_true_tile", what)
    if dst.buffer is not sbuf or on_true_tile.buffer is not sbuf:
        raise error(f"{what}: dst and on_true_tile must be in SBUF (GpSimd)")
    _same_elements(dst, on_true_tile, what, "on_true_tile")
    steps = [int(s) for s, _ in pattern]
    counts = [int(c) for _, c in pattern]
    if math.prod(counts) != _free(dst):
        raise error(f"{what}: pattern {pattern} gives {math.prod(counts)} elements per partition, "
                    f"dst has {_free(dst)}")
    if cmp_op is None:
        cmp_op = _ops.equal
    shaped = (dst.shape[0],) + tuple(counts)
    dview = _reshaped(dst, shaped, what)
    tview = _reshaped(on_true_tile, shaped, what)
    return _emit(tracer, name, _core.OP_AFFINE_SELECT, GPSIMD, dview, tview, alu0=_alu(cmp_op),
                 imm0=float(offset), imm1=float(channel_multiplier), imm2=float(on_false_value),
                 pattern=[0] + steps)


def _reshaped(x, shape, what):
    if x.shape == tuple(shape):
        return x
    if not x.is_contiguous():
        raise error(f"{what}: the tile must be contiguous over its free dims to take the pattern's "
                    "shape")
    return x.reshape(shape)


def bn_stats(dst, data, name=None):
    """Per partition (up to 512 elements, nl.tile_size.bn_stats_fmax): count, mean and
    variance * count of the even and of the odd elements, 6 values (Vector engine, FP32)."""
    what = "bn_stats"
    tracer = _core.current_tracer()
    _on_chip(data, "data", what)
    _on_chip(dst, "dst", what)
    if _free(data) > 512:
        raise error(f"{what}: data has {_free(data)} elements per partition; the hardware takes "
                    "at most 512 (nl.tile_size.bn_stats_fmax): tile it and aggregate with bn_aggr")
    if dst.shape[0] != data.shape[0] or _free(dst) != 6:
        raise error(f"{what}: dst must be [{data.shape[0]}, 6]; got {dst.shape}")
    return _emit(tracer, name, _core.OP_BN_STATS, VECTOR, dst, data)


def bn_aggr(dst, data, name=None):
    """Mean and variance per partition from one or more bn_stats outputs (count, mean,
    variance * count triples), Vector engine."""
    what = "bn_aggr"
    tracer = _core.current_tracer()
    _on_chip(data, "data", what)
    _on_chip(dst, "dst", what)
    if _free(data) % 3:
        raise error(f"{what}: data has {_free(data)} elements per partition, not a multiple of 3")
    if dst.shape[0] != data.shape[0] or _free(dst) != 2:
        raise error(f"{what}: dst must be [{data.shape[0]}, 2]; got {dst.shape}")
    return _emit(tracer, name, _core.OP_BN_AGGR, VECTOR, dst, data)


def _eight(dst, data, what, lo=8):
    _on_chip(data, "data", what)
    _on_chip(dst, "dst", what)
    if not lo <= _free(data) <= 16384:
        raise error(f"{what}: data has {_free(data)} elements per partition; 8..16384 allowed")
    if dst.shape[0] != data.shape[0] or _free(dst) != 8:
        raise error(f"{what}: dst must be [{data.shape[0]}, 8]; got {dst.shape}")


def max8(dst, src, name=None):
    """The 8 largest values of each partition, descending (Vector engine)."""
    _eight(dst, src, "max8")
    return _emit(_core.current_tracer(), name, _core.OP_MAX8, VECTOR, dst, src)


def nc_find_index8(dst, data, vals, name=None):
    """dst[p, j] = index of the first data[p, :] equal to vals[p, j] (all ones if absent); dst is
    uint32 or uint16."""
    what = "nc_find_index8"
    _eight(dst, data, what)
    if dst.dtype.name not in ("uint32", "uint16"):
        raise error(f"{what}: dst must be uint32 or uint16, got {dst.dtype}")
    _on_chip(vals, "vals", what)
    if _free(vals) != 8 or vals.shape[0] != data.shape[0]:
        raise error(f"{what}: vals must hold 8 values per partition")
    return _emit(_core.current_tracer(), name, _core.OP_FIND_INDEX8, VECTOR, dst, data,
                 _view_like(vals, dst))


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """dst = data with the first match of each of the 8 vals per partition replaced by imm (vals
    taken from the last to the first); their indices to dst_idx."""
    what = "nc_match_replace8"
    tracer = _core.current_tracer()
    _on_chip(data, "data", what)
    _on_chip(dst, "dst", what)
    _same_elements(dst, data, what, "data")
    _on_chip(vals, "vals", what)
    if _free(vals) != 8 or vals.shape[0] != data.shape[0]:
        raise error(f"{what}: vals must hold 8 values per partition")
    if dst_idx is not None:
        _on_chip(dst_idx, "dst_idx", what)
        if _free(dst_idx) != 8:
            raise error(f"{what}: dst_idx must hold 8 indices per partition")
    return _emit(tracer, name, _core.OP_MATCH_REPLACE8, VECTOR, dst, _view_like(data, dst), vals,
                 None, dst_idx, imm0=float(imm))


def reciprocal(dst, data, name=None):
    """dst = 1 / data on the Vector engine (FP32 inside)."""
    what = "reciprocal"
    tracer = _core.current_tracer()
    _on_chip(data, "data", what)
    _on_chip(dst, "dst", what)
    _same_elements(dst, data, what, "data")
    return _emit(tracer, name, OP_ACT, VECTOR, dst, _view_like(data, dst), act=_ops.reciprocal.act,
                 imm0=1.0)


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                reduce_init=0.0, name=None):
    """dst = exp(src - max_value) on the Vector engine (NeuronCore-v4), with its sum through the
    accumulators into reduce_res."""
    what = "exponential"
    tracer = _core.current_tracer()
    if tracer.spec["version"] < 4:
        raise error(f"{what} is a NeuronCore-v4 (trn3) instruction; use nisa.activation(op=nl.exp, "
                    "bias=-max) on earlier cores")
    _on_chip(src, "src", what)
    _on_chip(dst, "dst", what)
    _same_elements(dst, src, what, "src")
    mview, mimm = _operand(max_value, dst, "max_value", what)
    red = _reduction(tracer, VECTOR, dst, _ops.add, reduce_res, reduce_cmd, reduce_init, op=what)
    # reverse0: the bias (max_value) is subtracted.
    return _emit(tracer, name, OP_ACT, VECTOR, dst, _view_like(src, dst), mview, None,
                 act=_ops.exp.act, imm0=1.0, imm1=mimm, reverse0=True, **red)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """dst = src where predicate (uint8/16/32) is nonzero (zero with reverse_pred); elsewhere dst
    keeps its values. src is a tile or a number (Vector engine)."""
    what = "tensor_copy_predicated"
    tracer = _core.current_tracer()
    _on_chip(dst, "dst", what)
    _on_chip(predicate, "predicate", what)
    _same_elements(dst, predicate, what, "predicate")
    if predicate.dtype.name not in ("uint8", "uint16", "uint32", "bool_"):
        raise error(f"{what}: predicate must be uint8, uint16 or uint32, got {predicate.dtype}")
    sview, simm = None, 0.0
    if isinstance(src, Tensor):
        _on_chip(src, "src", what)
        _same_elements(dst, src, what, "src")
        if src.buffer is psum and predicate.buffer is psum:
            raise error(f"{what}: src and predicate cannot both be in PSUM")
        if src.dtype != dst.dtype:
            raise error(f"{what}: src and dst must share a dtype ({src.dtype} vs {dst.dtype})")
        sview = _view_like(src, dst)
    else:
        simm = float(src)
    return _emit(tracer, name, OP_SELECT, VECTOR, dst, _view_like(predicate, dst), sview, dst,
                 imm0=simm, negate=bool(reverse_pred))


# ---------------------------------------------------------------------------------------------
# MX (microscaling) formats, NeuronCore-v4


def _need_v4(what):
    tracer = _core.current_tracer()
    if tracer.spec["version"] < 4:
        raise error(f"{what} needs NeuronCore-v4 (trn3); this kernel specialises for "
                    f"NeuronCore-v{tracer.spec['version']} ({tracer.target})")
    return tracer


def quantize_mx(dst, src, dst_scale, name=None):
    """MXFP8 quantisation on the Vector engine: per group of 8 partitions x 4 values, the scale
    2^(floor(log2 amax) - (Emax - 1)) (Emax 8 for e4m3fn, 15 for e5m2; 2^-127 for an all-zero
    group) to dst_scale at partition (group // 4) * 32 + group % 4, and the values / scale
    rounded to nearest even, packed four to a dst element."""
    what = "quantize_mx"
    tracer = _need_v4(what)
    for w, x in (("dst", dst), ("src", src), ("dst_scale", dst_scale)):
        _on_chip(x, w, what)
        if x.buffer is not sbuf:
            raise error(f"{what}: {w} must be in SBUF")
    if src.dtype.name not in ("bfloat16", "float16"):
        raise error(f"{what}: src must be bfloat16 or float16, got {src.dtype}")
    if dst.dtype.name not in ("float8_e5m2_x4", "float8_e4m3fn_x4"):
        raise error(f"{what}: dst must be float8_e5m2_x4 or float8_e4m3fn_x4, got {dst.dtype}")
    if dst_scale.dtype.name not in ("float8_e8m0fnu", "uint8"):
        raise error(f"{what}: dst_scale must be float8_e8m0fnu or uint8, got {dst_scale.dtype}")
    p = src.shape[0]
    if p % 32 and p not in (8, 16):
        raise error(f"{what}: src has {p} partitions; a multiple of 32 (up to 128) is needed")
    if _free(src) % 4:
        raise error(f"{what}: src has {_free(src)} elements per partition, not a multiple of 4")
    if dst.shape[0] != p or _free(dst) * 4 != _free(src):
        raise error(f"{what}: dst must be [{p}, {_free(src) // 4}] x4 elements; got {dst.shape}")
    need = ((p // 8 - 1) // 4) * 32 + min(4, p // 8)
    if dst_scale.shape[0] < need or _free(dst_scale) != _free(dst):
        raise error(f"{what}: dst_scale must be [>= {need}, {_free(dst)}] (the scales of each "
                    f"quadrant on its first 4 partitions); got {dst_scale.shape}")
    return _emit(tracer, name, _core.OP_QUANTIZE_MX, VECTOR, dst, src, None, None, dst_scale)


def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None,
                 tile_size=None, accumulate=None, name=None):
    """dst[M, N] (+)= MX matmul on the Tensor engine (NeuronCore-v4): stationary [K, M] and
    moving [K, N] in x4 formats (logical contraction 4K <= 512), each with its scale tile
    (float8_e8m0fnu or uint8; partition k's scale at (k // 32) * 32 + (k % 32) // 8). FP32
    accumulation; dst float32 or bfloat16 in PSUM."""
    what = "nc_matmul_mx"
    tracer = _need_v4(what)
    _tensor(dst, "dst")
    for w, x in (("stationary", stationary), ("moving", moving),
                 ("stationary_scale", stationary_scale), ("moving_scale", moving_scale)):
        _on_chip(x, w, what)
        if x.buffer is not sbuf:
            raise error(f"{what}: {w} must be in SBUF")
    for w, x in (("stationary", stationary), ("moving", moving)):
        if not x.dtype.packed:
            raise error(f"{what}: {w} must be float8_e5m2_x4, float8_e4m3fn_x4 or "
                        f"float4_e2m1fn_x4, got {x.dtype}")
    for w, x in (("stationary_scale", stationary_scale), ("moving_scale", moving_scale)):
        if x.dtype.name not in ("float8_e8m0fnu", "uint8"):
            raise error(f"{what}: {w} must be float8_e8m0fnu or uint8, got {x.dtype}")
    k, m, n = stationary.shape[0], _free(stationary), _free(moving)
    if moving.shape[0] != k:
        raise error(f"{what}: stationary and moving must share the partition (contraction) dim")
    if k % 32 or k > PMAX:
        raise error(f"{what}: the contraction partitions ({k}) must be a multiple of 32, <= 128")
    if m > STATIONARY_FMAX or m % 2:
        raise error(f"{what}: stationary free size {m} must be even and <= 128")
    fmax = 8192 if dst.dtype.itemsize == 2 else 4096
    if n > fmax:
        raise error(f"{what}: moving free size {n} exceeds {fmax} for a {dst.dtype} dst")
    need = ((k - 1) // 32) * 32 + 4
    for w, x, f in (("stationary_scale", stationary_scale, m), ("moving_scale", moving_scale, n)):
        if x.shape[0] < need or _free(x) != f:
            raise error(f"{what}: {w} must be [>= {need}, {f}]; got {x.shape}")
    if dst.buffer is not psum:
        raise error(f"{what} writes PSUM; dst is in {dst.buffer.name}")
    if dst.dtype.name not in ("float32", "bfloat16"):
        raise error(f"{what}: dst must be float32 or bfloat16, got {dst.dtype}")
    if dst.shape[0] != m or _free(dst) != n:
        raise error(f"{what}: dst {dst.shape} must be [{m}, {n}]")
    tile = _pe_tile(tracer, tile_position, tile_size, k, m, what)
    return _emit(tracer, name, _core.OP_MATMUL_MX, TENSOR, dst, stationary, moving,
                 stationary_scale, moving_scale, accumulate=accumulate, pattern=tile)


# ---------------------------------------------------------------------------------------------
# DMA transpose


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown,
                  oob_mode=oob_mode.error, name=None):
    """dst = src with its dims permuted (`axes`; by default [1, 0], [2, 1, 0] or [3, 1, 2, 0]),
    moved by the DMA engines (2- and 4-byte dtypes; NeuronCore-v3 and later)."""
    what = "dma_transpose"
    tracer = _core.current_tracer()
    if tracer.spec["version"] < 3:
        raise error(f"{what} needs NeuronCore-v3 or later (trn2 / trn3)")
    if isinstance(dst, _indirect.IndirectAccess):
        raise error(f"{what}: dst is placed at run time; AWS's indirect transpose gathers its "
                    "src (an HBM tensor's .ap(vector_offset=)) into an SBUF dst")
    if isinstance(src, _indirect.IndirectAccess):
        return _indirect_transpose(tracer, dst, src, axes, dge_mode, oob_mode, what)
    _tensor(dst, "dst")
    _tensor(src, "src")
    if src.dtype.itemsize not in (2, 4):
        raise error(f"{what}: DMA transposes 2- and 4-byte dtypes, got {src.dtype}")
    # AWS's defaults by rank: [1, 0], [2, 1, 0] and, for 4-D, [3, 1, 2, 0] (the middle dims
    # keep their order; not the reversal).
    default = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
    if axes is None and src.ndim not in default:
        raise error(f"{what}: a {src.ndim}-D source has no default permutation (2-, 3- and 4-D "
                    "do); pass axes=")
    axes = tuple(axes) if axes is not None else default[src.ndim]
    view = src.permute(axes) if not src._buffer.on_chip or axes[0] == 0 else None
    if view is None:
        # An on-chip source whose partition dim moves: read it through a free-dim view of the
        # same bytes (the DMA engine addresses SBUF by partition and offset).
        view = Tensor(src._buffer, [src.shape[a] for a in axes], [src.strides[a] for a in axes],
                      src.offset, src._dtype)
    if tuple(view.shape) != tuple(dst.shape):
        raise error(f"{what}: dst {dst.shape} must be the transposed shape {tuple(view.shape)} "
                    "(same rank)")
    for w, x in (("dst", dst), ("src", src)):
        if x.buffer is psum:
            raise error(f"{what}: {w} is in PSUM; DMA moves HBM and SBUF data")
    return _emit(tracer, name, OP_DMA, DMA, dst, view, axes=1)


def _indirect_transpose(tracer, dst, src, axes, mode, oob, what):
    """AWS's indirect transpose (0.6 stub, dma_transpose: "DMA Indirect Transpose Constraints"):
    src an HBM tensor's .ap(..., vector_offset=<[P, 1] uint32 SBUF tile>, indirect_dim=d), dst
    the gathered rows permuted, gathered = src[indices], dst = gathered transposed. It runs as
    the indirect DMA of nisa.dma_copy (the indices read and bounds-checked when it runs) into
    dst's view in src's dim order."""
    if not src.per_partition:
        raise error(f"{what}: an indirect transpose gathers by a vector_offset (one index per "
                    "row); a scalar_offset source is not among AWS's indirect transposes")
    if getattr(mode, "name", mode) not in ("unknown", "swdge"):
        raise error(f"{what}: an indirect transpose runs on the software DGE: dge_mode must be "
                    f"unknown or swdge, got {mode!r}")
    if src.dtype.itemsize != 2:
        raise error(f"{what}: an indirect transpose moves 2-byte dtypes, got {src.dtype}")
    shape, index = tuple(src.shape), src.index
    if index.dtype.name != "uint32":
        raise error(f"{what}: the indices of an indirect transpose are uint32 (AWS), got "
                    f"{index.dtype}")
    cols = index.shape[1]
    if cols > 1 and index.shape[0] != 128:
        raise error(f"{what}: an index tile of {cols} columns has exactly 128 partitions (AWS: "
                    f"'When indices.shape[1] > 1: indices.shape[0] must be exactly 128'); got "
                    f"{list(index.shape)}")
    if not (16 <= index.shape[0] <= 128 and index.shape[0] % 16 == 0) or shape[0] % 16:
        raise error(f"{what}: an indirect transpose gathers rows in multiples of 16 by an index "
                    f"tile of 16 to 128 partitions, a multiple of 16 (AWS); this one {shape[0]} "
                    f"rows by {list(index.shape)}")
    if shape[-1] > 128:
        raise error(f"{what}: an indirect transpose's rows end in at most 128 elements "
                    f"(src.shape[-1] <= 128, AWS); got {shape[-1]}")
    if len(shape) == 4 and 1 not in shape[1:3]:
        raise error(f"{what}: a 4-D indirect source has size 1 on dim 1 or 2 (AWS); got {shape}")
    default = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
    if axes is None and len(shape) not in default:
        raise error(f"{what}: a {len(shape)}-D source has no default permutation; pass axes=")
    axes = tuple(axes) if axes is not None else default[len(shape)]
    if sorted(axes) != list(range(len(shape))):
        raise error(f"{what}: axes={axes} is not a permutation of the source's {len(shape)} dims")
    _tensor(dst, "dst")
    if dst.buffer is not sbuf:
        raise error(f"{what}: the dst of an indirect transpose is an SBUF tile, got "
                    f"{dst.buffer.name}")
    if tuple(dst.shape) != tuple(shape[a] for a in axes):
        raise error(f"{what}: dst {dst.shape} must be the transposed shape "
                    f"{tuple(shape[a] for a in axes)} (same rank)")
    if dst.dtype != src.dtype:
        raise error(f"{what}: dst is {dst.dtype}, src {src.dtype}: a transpose keeps the dtype")
    # dst's dims in src's order: row p of the gather lands where dst holds it after the
    # permutation (a view of the same bytes, as the DMA engine addresses SBUF).
    inverse = [axes.index(j) for j in range(len(axes))]
    rows_view = Tensor(dst._buffer, [dst.shape[a] for a in inverse],
                       [dst.strides[a] for a in inverse], dst.offset, dst._dtype)
    skip = getattr(oob, "name", oob) == "skip"
    # A [128, N] index tile names the rows column by column (AWS: flat_indices =
    # indices.T.flatten()[:src.shape[0]]): column c gathers rows 128 c .. 128 c + 127, each
    # column one indirect DMA of a [128, 1] index, as the [P, 1] form runs.
    first = None
    for c in range(-(-shape[0] // index.shape[0])):
        lo = c * index.shape[0]
        n = min(index.shape[0], shape[0] - lo)
        column = Tensor(index._buffer, (n, 1), (index.strides[0], 1),
                        index.offset + c * index.strides[1], index._dtype)
        part = _indirect.IndirectAccess(src.rows, column, src.free_axes, src.base,
                                        src.indexed_dim)
        rows_part = Tensor(rows_view._buffer, (n,) + tuple(rows_view.shape[1:]),
                           rows_view.strides, rows_view.offset + lo * rows_view.strides[0],
                           rows_view._dtype)
        index_at = _indirect.dma_copy(rows_part, part, what=what, skip_oob=skip)
        tracer.instructions[index_at].skip_oob = skip
        # Timed as a DMA transpose of the gathered rows (Program.h, kDmaIndirect's axes bit 2),
        # not as a gather into a strided view, one descriptor per element.
        tracer.instructions[index_at].axes |= 4
        first = index_at if first is None else first
    return NkiInstruction(first)


# ---------------------------------------------------------------------------------------------
# Selection, gathers and cumulative reductions (NKI 0.6). Their semantics and rules follow AWS's
# API reference for each; docs/nki.md ("Selection and gather instructions") records the
# readings chosen where the reference leaves a choice.

FP32_MIN = -3.4028234663852886e38
# The arithmetic ALU operations (not comparisons, logical or bit operations).
_ARITHMETIC = {_ops.add.alu, _ops.subtract.alu, _ops.multiply.alu, _ops.divide.alu,
               _ops.maximum.alu, _ops.minimum.alu, _ops.power.alu, _ops.fmod.alu, _ops.mod.alu,
               _ops.abs_max.alu, _ops.abs_min.alu}
_COMPARISONS = {_ops.equal.alu, _ops.less.alu, _ops.less_equal.alu, _ops.greater.alu,
                _ops.greater_equal.alu}


def _per_partition(value, dst, what, op):
    """A number, or a tile with one element per partition (as a [P, 1] view): (view, imm)."""
    view, imm = _operand(value, dst, what, op)
    if view is None:
        return None, imm
    stride = value.strides[0] if value.ndim else 0
    return Tensor(value._buffer, (dst.shape[0], 1), (stride, 0), value.offset, value._dtype), 0.0


def _dtypes(x, allowed, what, op):
    if x.dtype.name not in allowed:
        raise error(f"{op}: {what} is {x.dtype}; allowed: {', '.join(allowed)}")


def _in_sbuf(x, what, op):
    _on_chip(x, what, op)
    if x.buffer is not sbuf:
        raise error(f"{op}: {what} must be in SBUF (the GpSimd engine cannot access PSUM); it is "
                    f"in {x.buffer.name}")


def _need(version, what):
    tracer = _core.current_tracer()
    if tracer.spec["version"] < version:
        raise error(f"{what} needs NeuronCore-v{version} or later; this kernel specialises for "
                    f"NeuronCore-v{tracer.spec['version']} ({tracer.target})")
    return tracer


def _max_reduction(tracer, dst, reduce_op, reduce_res, cmd, what):
    """select_reduce / range_select: a max reduction through the Vector engine's accumulators."""
    if reduce_op is not None and _alu(reduce_op) != _ops.maximum.alu:
        raise error(f"{what}: reduce_op must be nl.maximum (the only reduction the instruction "
                    f"has), got {reduce_op!r}")
    cmd = reduce_cmd(cmd) if not isinstance(cmd, reduce_cmd) else cmd
    if cmd == reduce_cmd.load_reduce:
        raise error(f"{what}: reduce_cmd.load_reduce takes an initial value this instruction has "
                    "no parameter for; use reset_reduce or reduce")
    if reduce_res is not None and not reduce_res.dtype.is_float:
        raise error(f"{what}: reduce_res must have a float dtype, got {reduce_res.dtype}")
    return _reduction(tracer, VECTOR, dst, _ops.maximum, reduce_res, cmd, op=what)


def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=reduce_cmd.reset_reduce,
                             name=None):
    """Per partition, along the free dims: r = op1(src[i] op0 imm0, r); dst[i] = r (Vector
    engine, FP32 inside). r starts at op1's identity (reset_reduce), continues from the Vector
    engine's accumulators (reduce) or starts at imm1 (load_reduce), and is left in the
    accumulators. op1: nl.add, nl.multiply, nl.maximum or nl.minimum."""
    what = "tensor_scalar_cumulative"
    tracer = _core.current_tracer()
    _on_chip(src, "src", what)
    _on_chip(dst, "dst", what)
    _same_elements(dst, src, what, "src")
    allowed = ("float32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
               "uint8", "uint16", "int8", "int16", "bool_")
    _dtypes(src, allowed, "src", what)
    _dtypes(dst, allowed, "dst", what)
    if src.ndim > 4 or dst.ndim > 4:
        raise error(f"{what}: src and dst have at most three free dims")
    a0, a1 = _alu(op0), _alu(op1)
    if a0 not in _ARITHMETIC:
        raise error(f"{what}: op0 must be an arithmetic operation, got {op0!r}")
    if a1 == _ops.subtract.alu:
        raise error(f"{what}: op1=nl.subtract is refused: AWS's reference writes the step as "
                    "op1(x, r), which for subtract is x - r (an alternating sum) where a running "
                    "difference r - x may be meant, and nothing published settles which; use "
                    "nl.add with op0 negating the input")
    if a1 not in (_ops.add.alu, _ops.multiply.alu, _ops.maximum.alu, _ops.minimum.alu):
        raise error(f"{what}: op1 must be nl.add, nl.multiply, nl.maximum or nl.minimum, got "
                    f"{op1!r}")
    cmd = _ReduceCmd(reduce_cmd) if not isinstance(reduce_cmd, enum.Enum) else reduce_cmd
    if cmd not in (_ReduceCmd.reset_reduce, _ReduceCmd.reduce,
                   _ReduceCmd.load_reduce):
        raise error(f"{what}: reduce_cmd must be reset_reduce, reduce or load_reduce (where the "
                    f"running value starts), got {cmd}")
    v0, i0 = _per_partition(imm0, dst, "imm0", what)
    v1, i1 = None, 0.0
    if cmd == _ReduceCmd.load_reduce:
        if imm1 is None:
            raise error(f"{what}: reduce_cmd.load_reduce starts from imm1; pass it")
        v1, i1 = _per_partition(imm1, dst, "imm1", what)
    for w, v in (("imm0", v0), ("imm1", v1)):
        if v is not None and v.dtype != float32:
            raise error(f"{what}: an {w} tile must be float32, got {v.dtype}")
    return _emit(tracer, name, _core.OP_CUMULATIVE, VECTOR, dst, _view_like(src, dst), v0, v1,
                 None, tracer.accumulator(VECTOR), alu0=a0, alu1=a1, imm0=i0, imm1=i1,
                 reduce_cmd=cmd.value)


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=_ops.maximum, reverse_pred=False, name=None):
    """dst = predicate (!= 0, inverted with reverse_pred) ? on_true : on_false on the Vector
    engine; on_false a number or a [P, 1] tile. With reduce_res or a reduce_cmd, the max of each
    partition's result through the Vector engine's accumulators."""
    what = "select_reduce"
    tracer = _core.current_tracer()
    for w, x in (("dst", dst), ("predicate", predicate), ("on_true", on_true)):
        _on_chip(x, w, what)
    _same_elements(dst, on_true, what, "on_true")
    _same_elements(dst, predicate, what, "predicate")
    if on_true.buffer is psum and predicate.buffer is psum:
        raise error(f"{what}: on_true and predicate cannot both be in PSUM")
    _dtypes(predicate, ("int8", "uint8", "int16", "uint16", "bool_"), "predicate", what)
    if on_true.dtype.name in ("int32", "uint32"):
        raise error(f"{what}: on_true cannot be {on_true.dtype} (int32 / uint32 are not selected "
                    "by the Vector engine's select path)")
    fview, fimm = _per_partition(on_false, dst, "on_false", what)
    red = _max_reduction(tracer, dst, reduce_op, reduce_res, reduce_cmd, what)
    return _emit(tracer, name, _core.OP_SELECT_REDUCE, VECTOR, dst, _view_like(predicate, dst),
                 _view_like(on_true, dst), fview, imm0=fimm, reverse0=bool(reverse_pred), **red)


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=reduce_cmd.reset_reduce, reduce_res=None, reduce_op=_ops.maximum,
                 range_start=0, on_false_value=FP32_MIN, name=None):
    """dst = on_true_tile where comp_op0(range_start + i, bound0) and comp_op1(range_start + i,
    bound1), i the element's index along the (flattened) free dims, else on_false_value (which
    must be FP32_MIN); the max of each partition's result through the Vector engine's
    accumulators into reduce_res (NeuronCore-v3 and later)."""
    what = "range_select"
    tracer = _need(3, what)
    _on_chip(dst, "dst", what)
    _on_chip(on_true_tile, "on_true_tile", what)
    _same_elements(dst, on_true_tile, what, "on_true_tile")
    if not on_true_tile.dtype.is_float:
        raise error(f"{what}: on_true_tile must have a float dtype, got {on_true_tile.dtype}")
    views = []
    for w, b in (("bound0", bound0), ("bound1", bound1)):
        if not isinstance(b, Tensor):
            raise error(f"{what}: {w} must be a [{dst.shape[0]}, 1] float32 tile")
        _dtypes(b, ("float32",), w, what)
        views.append(_per_partition(b, dst, w, what)[0])
    c0, c1 = _alu(comp_op0), _alu(comp_op1)
    for w, c in (("comp_op0", c0), ("comp_op1", c1)):
        if c not in _COMPARISONS:
            raise error(f"{what}: {w} must be nl.equal, nl.less, nl.less_equal, nl.greater or "
                        "nl.greater_equal")
    if not _core._is_int(range_start):
        raise error(f"{what}: range_start must be an integer known when the kernel specialises")
    if abs(int(range_start)) + _free(dst) > 1 << 24:
        raise error(f"{what}: range_start + index reaches {int(range_start) + _free(dst)}; the "
                    "comparison runs in FP32, exact only below 2^24")
    import numpy as np

    if np.float32(on_false_value) != np.float32(FP32_MIN):
        raise error(f"{what}: on_false_value must be FP32_MIN (-3.4028235e+38), a hardware "
                    f"constraint; got {on_false_value}")
    red = _max_reduction(tracer, dst, reduce_op, reduce_res, reduce_cmd, what)
    return _emit(tracer, name, _core.OP_RANGE_SELECT, VECTOR, dst, _view_like(on_true_tile, dst),
                 views[0], views[1], alu0=c0, alu1=c1, imm0=float(range_start),
                 imm1=float(FP32_MIN), **red)


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """On partitions 0, 16, ..., 112 (each GpSimd core's first): dst = the indices (+
    index_offset) of src's nonzero elements, then padding_val, then their count, in one more
    element than src has per partition. Other partitions of dst are left as they are.
    NeuronCore-v3 and later."""
    what = "nonzero_with_count"
    tracer = _need(3, what)
    _in_sbuf(src, "src", what)
    _in_sbuf(dst, "dst", what)
    _dtypes(src, ("float32", "int32"), "src", what)
    _dtypes(dst, ("int32",), "dst", what)
    if dst.shape[0] != src.shape[0] or _free(dst) != _free(src) + 1:
        raise error(f"{what}: dst must be [{src.shape[0]}, {_free(src) + 1}] (one more element "
                    f"than src per partition, for the count); got {dst.shape}")
    for w, x in (("src", src), ("dst", dst)):
        if _partition_of(x) % 16:
            raise error(f"{what}: {w} starts at partition {_partition_of(x)}; each GpSimd core "
                        "works on its first partition (0, 16, ..., 112), so tiles start at a "
                        "multiple of 16")
    for w, v in (("index_offset", index_offset), ("padding_val", padding_val)):
        if not _core._is_int(v) or not -(1 << 31) <= int(v) < (1 << 31):
            raise error(f"{what}: {w} must be an int32, got {v!r}")
    return _emit(tracer, name, _core.OP_NONZERO_WITH_COUNT, GPSIMD, dst, src,
                 imm0=float(index_offset), imm1=float(padding_val))


def sequence_bounds(dst, segment_ids, name=None):
    """For each element of segment_ids [1, n], the [start, end) of its run of equal ids, as
    dst[0, 0, i] and dst[0, 1, i]; id 0 is padding (start n, end -1). GpSimd engine; float32 or
    int32."""
    what = "sequence_bounds"
    tracer = _core.current_tracer()
    _in_sbuf(segment_ids, "segment_ids", what)
    _in_sbuf(dst, "dst", what)
    for w, x in (("segment_ids", segment_ids), ("dst", dst)):
        _dtypes(x, ("float32", "int32"), w, what)
        if x.shape[0] != 1:
            raise error(f"{what}: {w} must have partition dim 1, got {x.shape}")
    n = _free(segment_ids)
    if _free(dst) != 2 * n:
        raise error(f"{what}: dst must be [1, 2, {n}] (start and end per element); got "
                    f"{dst.shape}")
    return _emit(tracer, name, _core.OP_SEQUENCE_BOUNDS, GPSIMD, dst, segment_ids)


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """Within each quadrant of 32 partitions: dst partition i = src partition shuffle_mask[i]
    (255: dst partition i is left as it is), the same mask for every quadrant (Vector engine;
    SBUF or PSUM; in place allowed)."""
    what = "nc_stream_shuffle"
    tracer = _core.current_tracer()
    _on_chip(src, "src", what)
    _on_chip(dst, "dst", what)
    if src.dtype != dst.dtype:
        raise error(f"{what}: dst ({dst.dtype}) must have src's dtype ({src.dtype})")
    if _free(src) != _free(dst):
        raise error(f"{what}: dst and src must have the same elements per partition; got "
                    f"{dst.shape} and {src.shape}")
    mask = list(shuffle_mask)
    if len(mask) != 32:
        raise error(f"{what}: shuffle_mask must have 32 entries, got {len(mask)}")
    for k, m in enumerate(mask):
        if not _core._is_int(m) or not (0 <= int(m) < 32 or int(m) == 255):
            raise error(f"{what}: shuffle_mask[{k}] = {m!r}; entries are 0..31 (a source "
                        "partition of the quadrant) or 255 (leave the partition unmodified)")
    active = -(-max(src.shape[0], dst.shape[0]) // 32) * 32
    allowed = {96: (0,), 128: (0,), 64: (0, 64), 32: (0, 32, 64, 96)}[active]
    for w, x in (("src", src), ("dst", dst)):
        if _partition_of(x) not in allowed:
            raise error(f"{what}: {w} starts at partition {_partition_of(x)}; with "
                        f"{active} active partitions the start must be one of {allowed}")
    words = []
    for k in range(4):
        w = sum(int(m) << (8 * j) for j, m in enumerate(mask[8 * k:8 * k + 8]))
        words.append(w - (1 << 64) if w >= 1 << 63 else w)
    return _emit(tracer, name, _core.OP_STREAM_SHUFFLE, VECTOR, dst, src, pattern=words)


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Each GpSimd core (16 partitions) gathers from its own partitions of src_buffer: its
    indices (uint16, the core's 16 partitions of `index` flattened partition-first) are element
    offsets into each partition's flattened free dims, and num_elem_per_idx contiguous elements
    are read at each. dst per partition: num_valid_indices x num_elem_per_idx elements, in
    src_buffer's dtype. An index that reads past a partition is an error."""
    what = "local_gather"
    tracer = _core.current_tracer()
    for w, x in (("dst", dst), ("src_buffer", src_buffer), ("index", index)):
        _in_sbuf(x, w, what)
    _dtypes(index, ("uint16",), "index", what)
    p = src_buffer.shape[0]
    if index.shape[0] != p or p % 16:
        raise error(f"{what}: src_buffer and index must have the same partitions, a multiple of "
                    f"16 (one GpSimd core per 16); got {src_buffer.shape} and {index.shape}")
    if num_elem_per_idx not in (1, 2, 4, 8, 16, 32):
        raise error(f"{what}: num_elem_per_idx must be 1, 2, 4, 8, 16 or 32, got "
                    f"{num_elem_per_idx!r}")
    per_core = 16 * _free(index)
    valid = per_core if num_valid_indices is None else num_valid_indices
    if not _core._is_int(valid) or not 0 < int(valid) <= per_core:
        raise error(f"{what}: num_valid_indices must be 1..{per_core} (the indices in a core's "
                    f"16 partitions of index), got {num_valid_indices!r}")
    if int(valid) > 4096:
        raise error(f"{what}: {valid} indices per GpSimd core; at most 4096")
    if dst.dtype != src_buffer.dtype:
        raise error(f"{what}: dst ({dst.dtype}) must have src_buffer's dtype "
                    f"({src_buffer.dtype}); local_gather does not convert")
    if dst.shape[0] != p or _free(dst) != int(valid) * num_elem_per_idx:
        raise error(f"{what}: dst must be [{p}, {int(valid) * num_elem_per_idx}] elements "
                    f"(num_valid_indices x num_elem_per_idx per partition); got {dst.shape}")
    return _emit(tracer, name, _core.OP_LOCAL_GATHER, GPSIMD, dst, src_buffer, index,
                 imm0=float(num_elem_per_idx), imm1=float(valid))


def nc_n_gather(dst, data, indices, name=None):
    """dst[p, j] = data[p, indices[p, j]], data's free dims flattened (GpSimd engine, SBUF,
    uint32 indices). An index outside [0, elements per partition) is an error."""
    return _n_gather("nc_n_gather", dst, data, indices, ("uint32",), name)


def _n_gather(what, dst, data, indices, index_dtypes, name):
    tracer = _core.current_tracer()
    for w, x in (("dst", dst), ("data", data), ("indices", indices)):
        _in_sbuf(x, w, what)
    _dtypes(indices, index_dtypes, "indices", what)
    if dst.dtype != data.dtype:
        raise error(f"{what}: dst ({dst.dtype}) must have data's dtype ({data.dtype})")
    if not dst.shape[0] == data.shape[0] == indices.shape[0]:
        raise error(f"{what}: dst, data and indices must have the same partitions; got "
                    f"{dst.shape}, {data.shape}, {indices.shape}")
    if _free(dst) != _free(indices):
        raise error(f"{what}: dst must hold one element per index ({_free(indices)} per "
                    f"partition); got {dst.shape}")
    return _emit(tracer, name, _core.OP_N_GATHER, GPSIMD, dst, data, indices)


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=oob_mode.error,
                name=None):
    """dst = srcs[0] + srcs[1] + ..., elementwise in FP32 on the DMA engines (HBM or SBUF,
    converting dtypes). reduce_op must be nl.add and every scale 1.0. With an HBM side placed
    by a vector_offset, AWS's read-modify-write: dst(HBM)[idx] += src(SBUF) (dst and one source
    the same indirect access) or dst(SBUF) += src(HBM)[idx] (the other source dst itself)."""
    what = "dma_compute"
    tracer = _core.current_tracer()
    mode = getattr(oob_mode, "name", oob_mode)
    if mode not in ("error", "skip"):
        raise error(f"{what}: oob_mode={oob_mode!r} is not an nisa.oob_mode")
    srcs = list(srcs) if isinstance(srcs, (list, tuple)) else [srcs]
    indirect = any(isinstance(x, _indirect.IndirectAccess) for x in [dst] + srcs)
    if not indirect:
        _tensor(dst, "dst")
    if not srcs:
        raise error(f"{what}: srcs is empty")
    if len(srcs) > 16:
        raise error(f"{what}: {len(srcs)} sources; at most 16")
    if _alu(reduce_op) != _ops.add.alu:
        raise error(f"{what}: reduce_op must be nl.add (the only reduction DMA engines do), got "
                    f"{reduce_op!r}")
    if scales is not None:
        scales = list(scales)
        if len(scales) != len(srcs) or any(float(s) != 1.0 for s in scales):
            raise error(f"{what}: scales must be one 1.0 per source (the only scale supported); "
                        f"got {scales}")
    if indirect:
        index = _indirect.dma_compute(dst, srcs, what=what, skip_oob=mode == "skip",
                                      unique_indices=bool(unique_indices))
        tracer.instructions[index].skip_oob = mode == "skip"
        return NkiInstruction(index)
    for k, x in enumerate([dst] + srcs):
        w = "dst" if k == 0 else f"srcs[{k - 1}]"
        _tensor(x, w)
        if x.buffer is psum:
            raise error(f"{what}: {w} is in PSUM; DMA moves HBM and SBUF data")
        if x.numel() != dst.numel():
            raise error(f"{what}: {w} {x.shape} and dst {dst.shape} hold different numbers of "
                        "elements")
    if len(srcs) <= 6:
        return _emit(tracer, name, _core.OP_DMA_COMPUTE, DMA, dst, *srcs)
    # An instruction here carries at most 6 operands: more sources continue the sum, in source
    # order, in a float32 scratch tensor in HBM (the FP32 sum the DMA engines keep, whatever
    # dst's dtype), and dst is written once, by the last step (so a source that is dst itself
    # is read before dst changes).
    acc = tracer.allocate(dst.shape, float32, _core.private_hbm, name="<dma_compute sum>")
    first = _emit(tracer, name, _core.OP_DMA_COMPUTE, DMA, acc, *srcs[:6])
    for k in range(6, len(srcs), 5):
        out = dst if k + 5 >= len(srcs) else acc
        _emit(tracer, name, _core.OP_DMA_COMPUTE, DMA, out, acc, *srcs[k:k + 5])
    return first


_ACTIVATE2_STAGES = {(_ops.multiply.alu, _ops.add.alu), (_ops.multiply.alu, _ops.subtract.alu),
                     (_ops.multiply.alu, 0), (_ops.add.alu, 0), (_ops.subtract.alu, 0), (0, 0)}


def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False,
              reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle, name=None):
    """dst = op(((data op0 imm0) op1 imm1), relu_param) on the Scalar engine, FP32 inside
    (NeuronCore-v4): (op0, op1) one of (multiply, add), (multiply, subtract), (multiply, bypass),
    (add, bypass), (subtract, bypass), (bypass, bypass); reverse swaps an operation's sides;
    imm0 / imm1 / relu_param numbers or [P, 1] tiles (relu_param: nl.prelu's slope). With
    reduce_op, the free-dim reduction through the Scalar engine's accumulators (reduce_cmd;
    idle leaves them as they are) into reduce_res."""
    what = "activate2"
    tracer = _need(4, what)
    _on_chip(data, "data", what)
    _on_chip(dst, "dst", what)
    _same_elements(dst, data, what, "data")
    act = getattr(_ops.resolve(op), "act", None)
    if act is None:
        raise error(f"{what}: {op!r} is not an activation function (nl.exp, nl.gelu, nl.prelu, ...)")
    a0 = 0 if op0 is None else _alu(op0)
    a1 = 0 if op1 is None else _alu(op1)
    if (a0, a1) not in _ACTIVATE2_STAGES:
        raise error(f"{what}: (op0, op1) = ({op0!r}, {op1!r}) is not one of the six the Scalar "
                    "engine has: (multiply, add), (multiply, subtract), (multiply, bypass), "
                    "(add, bypass), (subtract, bypass), (bypass, bypass)")
    if reverse0 and a0 == 0:
        raise error(f"{what}: reverse0 needs op0")
    if reverse1 and a1 == 0:
        raise error(f"{what}: reverse1 needs op1")
    v0, i0 = _per_partition(imm0, dst, "imm0", what)
    v1, i1 = _per_partition(imm1, dst, "imm1", what)
    if v0 is not None and v1 is not None and v0.dtype != v1.dtype:
        raise error(f"{what}: imm0 and imm1 tiles must share a dtype ({v0.dtype} vs {v1.dtype})")
    vr, ir = _per_partition(relu_param, dst, "relu_param", what)
    cmd = _ReduceCmd(reduce_cmd) if not isinstance(reduce_cmd, enum.Enum) else reduce_cmd
    if cmd == _ReduceCmd.load_reduce:
        raise error(f"{what}: reduce_cmd.load_reduce is not an activate2 command (idle, reset, "
                    "reduce or reset_reduce)")
    if reduce_op is not None and _alu(reduce_op) not in (
            _ops.add.alu, _ops.maximum.alu, _ops.minimum.alu, _ops.abs_max.alu, _ops.abs_min.alu):
        raise error(f"{what}: reduce_op must be nl.add, nl.maximum, nl.minimum, nl.abs_max or "
                    f"nl.abs_min, got {reduce_op!r}")
    if reduce_op is None and (reduce_res is not None or cmd != _ReduceCmd.idle):
        raise error(f"{what}: a reduction (reduce_res / reduce_cmd) needs reduce_op")
    red = _reduction(tracer, SCALAR, dst, reduce_op, reduce_res, cmd, op=what)
    red.pop("negate", None)
    return _emit(tracer, name, _core.OP_ACTIVATE2, SCALAR, dst, _view_like(data, dst), v0, v1,
                 f=vr, act=act, alu0=a0, alu1=a1, reverse0=bool(reverse0),
                 reverse1=bool(reverse1), imm0=i0, imm1=i1, imm2=ir, **red)


def topk(val_dst, idx_dst, src, n, name=None):
    """The K largest of each 16-partition group's snake of n BF16 values (value e at partition
    e % 16, column e // 16), K = val_dst's free size, in ascending order and in the same snake
    layout (result j at partition j % 16, column j // 16), with their snake indices (uint32) in
    idx_dst (GpSimd engine, SBUF)."""
    what = "topk"
    tracer = _core.current_tracer()
    for w, x in (("val_dst", val_dst), ("idx_dst", idx_dst), ("src", src)):
        _in_sbuf(x, w, what)
    _dtypes(src, ("bfloat16",), "src", what)
    _dtypes(val_dst, ("bfloat16",), "val_dst", what)
    _dtypes(idx_dst, ("uint32",), "idx_dst", what)
    p = src.shape[0]
    if p % 16 or val_dst.shape[0] != p or idx_dst.shape[0] != p:
        raise error(f"{what}: src, val_dst and idx_dst must have the same partitions, a multiple "
                    f"of 16 (one snake per 16); got {src.shape}, {val_dst.shape}, {idx_dst.shape}")
    if not _core._is_int(n) or not 8 <= int(n) < 65536:
        raise error(f"{what}: n must be an integer in [8, 65536), got {n!r}")
    n = int(n)
    k = _free(val_dst)
    if _free(idx_dst) != k:
        raise error(f"{what}: idx_dst must hold as many results as val_dst ({k}) per partition")
    if not 1 <= k < 32768 or k > n:
        raise error(f"{what}: K (val_dst's free size, {k}) must be in [1, 32768) and <= n ({n})")
    if _free(src) < -(-n // 16):
        raise error(f"{what}: a snake of {n} values needs {-(-n // 16)} columns; src has "
                    f"{_free(src)}")
    return _emit(tracer, name, _core.OP_TOPK, GPSIMD, val_dst, src, d=idx_dst, imm0=float(n))


# ---------------------------------------------------------------------------------------------
# Cross-core synchronisation and transfers between the two logical cores of an LNC=2 launch
# (kernel[2]: program k runs on core k). The tracer splits the programs at these points and runs
# every core's instructions before one before any after it (_core.Tracer._interleave_programs).


# The enums under other names: the calls below take parameters named engine / dma_engine.
_Engine, _DmaEngine = engine, dma_engine


def _cores_of_launch(tracer, what):
    if tracer.spec["version"] < 3:
        raise error(f"{what} needs NeuronCore-v3 or later (trn2 / trn3), as AWS documents it")
    n = math.prod(tracer.grid)
    if n > 2:
        raise error(f"{what} synchronises the two logical cores of an LNC=2 NeuronCore; this "
                    f"launch has a grid of {n} programs {tracer.grid}: launch kernel[2]")
    return n


def core_barrier(data, cores, engine=engine.gpsimd, name=None):
    """Every core in `cores` waits here until all of them have reached it; `data` is the tensor
    whose writes (before the barrier, on any core) the cores read after it. Only cores=(0, 1) on
    an LNC=2 launch (kernel[2]), or (0,) alone on a one-program launch.

    AWS's page says `data` must be in shared HBM; AWS's own library passes an SBUF tile (the
    MoE kernels' dynamic block index, bwmm_shard_on_I), which its compiler takes, and so is an
    SBUF tile here; PSUM is refused. The interpreter runs every core's instructions before the
    barrier ahead of any after it; the timeline holds only `engine` and the users of `data`
    (AWS: "other engines will not be blocked")."""
    what = "nisa.core_barrier"
    tracer = _core.current_tracer()
    _tensor(data, "data")
    if data.buffer is _core.psum:
        raise error(f"{what}: data must be a tensor in shared HBM (or SBUF, as AWS's library "
                    "uses it), got a PSUM tile")
    try:
        ids = tuple(int(c) for c in cores)
    except (TypeError, ValueError):
        raise error(f"{what}: cores must be a tuple of core ids such as (0, 1), got "
                    f"{cores!r}") from None
    n = _cores_of_launch(tracer, what)
    if sorted(ids) != list(range(n)) or len(set(ids)) != len(ids):
        raise error(f"{what}: cores={cores!r} on a launch of {n} program(s): the barrier needs "
                    f"every core of the launch, cores={tuple(range(n))}" +
                    (" (the second core never runs here: launch kernel[2] for LNC=2)"
                     if n == 1 else ""))
    if engine in (None, _Engine.unknown):
        eng = GPSIMD
    elif engine in (_Engine.dma, _Engine.sync):
        raise error(f"{what}: engine must be one of the compute engines (tensor, vector, scalar, "
                    f"gpsimd), got {engine!r}")
    else:
        eng = int(engine)
    # AWS: "The barrier will block execution on this engine, other engines will not be
    # blocked". The barrier reads `data` (operand a, axes bit 0): the timeline holds the named
    # engine and whatever touches `data` after it, the core's other engines run on. A view
    # placed at run time stands for its whole buffer (every place it may take).
    view = data if data.runtime_offset() is None else Tensor(data._buffer, data._buffer.shape)
    ins = NkiInstruction(tracer.emit(OP_BARRIER, eng, a=view, axes=1, name=name))
    tracer.instructions[ins.index].sync = _core.CoreSync(what, ("barrier",))
    return ins


def _views_overlap(x, y):
    """Whether two views share an element of the same buffer (views of different dtypes: by
    their spans, conservatively)."""
    if x._buffer is not y._buffer:
        return False

    def offsets(v):
        import numpy as np

        r = v.runtime_offset()  # placed at run time: every place it may take
        o = np.array([r.base + k * r.stride for k in range(r.count)] if r else [v.offset],
                     dtype=np.int64)
        for n, st in zip(v.shape, v.strides):
            o = (o[:, None] + np.arange(n, dtype=np.int64)[None, :] * st).ravel()
        return o

    if x._dtype is not None or y._dtype is not None:
        ox, oy = offsets(x), offsets(y)
        sx, sy = x.dtype.itemsize, y.dtype.itemsize
        return ox.min() * sx < (oy.max() + 1) * sy and oy.min() * sy < (ox.max() + 1) * sx
    import numpy as np

    return np.intersect1d(offsets(x), offsets(y)).size > 0


# nisa.dma_engine.gpsimd_dma: the most bytes per partition, by element size (AWS's limits).
_GPSIMD_DMA_PARTITION_BYTES = {4: 1024, 2: 512, 1: 256}


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma,
             name=None):
    """Exchanges tiles between the two logical cores of an LNC=2 launch: this core's `src` goes
    to `dst` on core send_to_rank while dst here receives core recv_from_rank's src. Both cores
    call it at the same point with the same pipe_id; the transfer is a DMA of src's bytes
    between the cores' barriers."""
    what = "nisa.sendrecv"
    tracer = _core.current_tracer()
    _tensor(src, "src")
    _tensor(dst, "dst")
    for label, x in (("src", src), ("dst", dst)):
        if x.buffer is not sbuf:
            raise error(f"{what}: {label} must be an SBUF tile, got {x.buffer.name}")
    if src.dtype != dst.dtype:
        raise error(f"{what}: src {src.dtype} and dst {dst.dtype} must have the same dtype")
    if src.shape[0] != dst.shape[0] or src.numel() != dst.numel():
        raise error(f"{what}: src {src.shape} and dst {dst.shape} must have the same partitions "
                    "and elements per partition")
    if _views_overlap(src, dst):
        raise error(f"{what}: src and dst overlap; the exchange would overwrite data still to "
                    "be sent: use separate tiles")
    n = _cores_of_launch(tracer, what)
    if n != 2:
        raise error(f"{what} moves data between the two logical cores of an LNC=2 launch; this "
                    "launch has one program: launch kernel[2]")
    me = tracer.program
    for label, r in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        if not _core._is_int(r) or not 0 <= int(r) < 2:
            raise error(f"{what}: {label} must be 0 or 1 (a core of the LNC=2 pair), got {r!r}")
        if int(r) == me:
            raise error(f"{what}: {label}={r} is this core (program {me}); the exchange is "
                        "with the other core of the pair")
    if not _core._is_int(pipe_id) or int(pipe_id) < 0:
        raise error(f"{what}: pipe_id must be a non-negative integer, got {pipe_id!r}")
    if dma_engine not in (_DmaEngine.dma, _DmaEngine.gpsimd_dma):
        raise error(f"{what}: dma_engine must be nisa.dma_engine.dma or gpsimd_dma, got "
                    f"{dma_engine!r}")
    if dma_engine == _DmaEngine.gpsimd_dma:
        size = src.dtype.itemsize
        limit = _GPSIMD_DMA_PARTITION_BYTES.get(size)
        per = src.numel() // src.shape[0] * size
        if src.shape[0] % 16 or limit is None or per > limit:
            raise error(f"{what}: dma_engine=gpsimd_dma takes a partition count that is a "
                        f"multiple of 16 and at most {limit} bytes per partition for "
                        f"{src.dtype}; src {src.shape} has {per}")
    ins = NkiInstruction(tracer.emit(OP_DMA, DMA, dst, src, name=name))
    tracer.instructions[ins.index].sync = _core.CoreSync(
        what, ("sendrecv", int(pipe_id)), peer=int(send_to_rank))
    return ins


# ---------------------------------------------------------------------------------------------
# Instructions this interpreter refuses, each with the reason (docs/nki.md lists them)

def _refused(fname, why, params):
    def f(*args, **kwargs):
        raise error(f"nki.isa.{fname} is not supported by this interpreter: {why}")

    f.__name__ = fname
    f.__qualname__ = fname
    f.__doc__ = f"Refused: {why}"
    import inspect

    _core.refused(f"nki.isa.{fname}", why)
    f.__signature__ = inspect.Signature(
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           default=None if p == "name" else inspect.Parameter.empty)
         for p in params])
    return f


_RNG = ("the hardware random number generators' bit streams are not published, so no result "
        "could be checked against hardware")
rng = _refused("rng", _RNG, ["dst", "engine", "name"])
dropout = _refused("dropout", _RNG, ["dst", "data", "prob", "name"])
set_rng_seed = _refused("set_rng_seed", _RNG, ["src_seeds", "name"])
rand_set_state = _refused("rand_set_state", _RNG, ["src_seeds", "engine", "name"])
rand_get_state = _refused("rand_get_state", _RNG, ["dst", "engine", "name"])
rand2 = _refused("rand2", _RNG, ["dst", "min", "max", "name"])
register_alloc = _loops.register_alloc
register_move = _loops.register_move
register_load = _loops.register_load
register_store = _loops.register_store



# Tensors' assignments and in-place operators run these instructions (nki._core.HOOKS).
_core.HOOKS.update(dma_copy=dma_copy, tensor_copy=tensor_copy, memset=memset,
                   tensor_tensor=tensor_tensor, tensor_scalar=tensor_scalar)


def _constants_module():
    """``nki.isa.constants``: the enums, importable as their own module (NKI 0.6 kernels do
    ``from nki.isa.constants import oob_mode``)."""
    import sys
    import types

    mod = types.ModuleType("nki.isa.constants", "The nki.isa enums.")
    for name in ("engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version",
                 "dma_engine"):
        setattr(mod, name, globals()[name])
    sys.modules["nki.isa.constants"] = mod
    return mod


constants = _constants_module()
