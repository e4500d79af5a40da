"""``nki.language`` (``nl``): tensors, memories, dtypes and the high-level operations of NKI 0.6.

High-level operations lower to ``nki.isa`` instructions: elementwise arithmetic to
``tensor_tensor`` / ``tensor_scalar`` on the Vector engine, math functions to ``activation`` on
the Scalar engine, reductions to ``tensor_reduce``, ``matmul`` / ``transpose`` to the Tensor
engine. Each result is a fresh SBUF tile (PSUM for matmul and transpose).
"""

from __future__ import annotations

import builtins
import contextlib
import math
import operator

from nki import _core, _indirect, _loops, _ops
from nki import isa as _isa
from nki._ops import (  # noqa: F401  (the operations, re-exported as nl.<name>)
    abs, abs_max, abs_min, add, all, arctan, average, bitwise_and, bitwise_or, bitwise_xor,
    bypass, ceil, cos, divide, equal, erf, erf_dx, exp, floor, fmod, gelu, gelu_apprx_sigmoid,
    gelu_apprx_sigmoid_dx, gelu_apprx_tanh, gelu_dx, greater, greater_equal, left_shift, less,
    less_equal, log, logical_and, logical_not, logical_or, logical_xor, max, maximum, min,
    minimum, mish, mod, multiply, negative, not_equal, power, prelu, prod, reciprocal, relu,
    right_shift, rsqrt, sigmoid, sign, silu, silu_dx, sin, softplus, sqrt, square, subtract, sum,
    tan, tanh, trunc,
)
from nki._core import (  # noqa: F401  (re-exported names)
    OP_PRINT, DType, NKIObject, NkiError, Tensor, bfloat16, bool_, error, float4_e2m1fn_x4,
    float8_e4m3, float8_e4m3fn, float8_e4m3fn_x4, float8_e5m2, float8_e5m2_x4, float8_e8m0fnu,
    float16, float32, hbm, int8, int16, int32, private_hbm, psum, sbuf, shared_hbm, tfloat32,
    uint8, uint16, uint32,
)

ndarray_type = Tensor
NkiTensor = Tensor


class MemoryRegion:
    """The memories a tensor lives in (``nl.sbuf``, ``nl.psum``, ``nl.private_hbm`` = ``nl.hbm``,
    ``nl.shared_hbm``)."""

    sbuf = sbuf
    psum = psum
    private_hbm = private_hbm
    shared_hbm = shared_hbm


def is_hbm(buffer):
    return _buffer_of(buffer).code == 0


def is_on_chip(buffer):
    return _buffer_of(buffer).code != 0


def is_psum(buffer):
    return _buffer_of(buffer) is psum


def is_sbuf(buffer):
    return _buffer_of(buffer) is sbuf


def _buffer_of(x):
    return x.buffer if isinstance(x, Tensor) else _memory(x)


def ds(start, size):
    """``size`` elements from ``start``: an index usable in any dim (``t[nl.ds(i * 128, 128)]``)."""
    return _core.DynamicSlice(start, size)


# ---------------------------------------------------------------------------------------------
# tile sizes


class _TileSize:
    """``nl.tile_size``: the hardware's tile limits (values for the kernel's NeuronCore version
    where they differ)."""

    pmax = _core.PMAX
    gemm_stationary_fmax = _core.STATIONARY_FMAX
    psum_bank_fmax = _core.PSUM_BANK_BYTES // 4
    psum_fmax = psum_bank_fmax  # name before NKI 0.4
    psum_bank_fmax_bytes = _core.PSUM_BANK_BYTES
    psum_num_banks = _core.PSUM_BANKS
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 4

    @property
    def gemm_moving_fmax(self):
        t = _core.current_tracer(optional=True)
        return (t.spec if t is not None else _core.TARGETS["trn2"])["moving_fmax"]

    @property
    def sbuf_fmax_bytes(self):
        t = _core.current_tracer(optional=True)
        return (t.spec if t is not None else _core.TARGETS["trn2"])["sbuf_partition_bytes"]

    @property
    def sbuf_size_bytes(self):
        return self.sbuf_fmax_bytes * self.pmax

    @property
    def sbuf_fmax(self):
        """The free size of an SBUF tile, in float32 elements."""
        return self.sbuf_fmax_bytes // 4

    @property
    def total_available_sbuf_size(self):
        """Deprecated in NKI 0.4 (the per-partition bytes, despite its name)."""
        return self.sbuf_fmax_bytes


tile_size = _TileSize()


# ---------------------------------------------------------------------------------------------
# loops, SPMD, debug


def affine_range(start, stop=None, step=1, **kwargs):
    """Deprecated alias of range() (NKI 0.6): loops are unrolled at specialisation."""
    return range(start, stop, step) if stop is not None else range(start)


def sequential_range(start, stop=None, step=1, **kwargs):
    return affine_range(start, stop, step)


def static_range(start, stop=None, step=1, **kwargs):
    return affine_range(start, stop, step)


def dynamic_range(start, stop=None, step=1, **kwargs):
    """Deprecated in NKI 0.6 (use fori_loop). Integer bounds unroll like range() (what the device
    loop computes); a register bound is a device loop (nki._loops), its body traced once."""
    lo, hi = (0, start) if stop is None else (start, stop)
    if _core._is_int(lo) and _core._is_int(hi) and _core._is_int(step):
        return affine_range(start, stop, step)
    return _loops.dynamic_range(start, stop, step)


def fori_loop(lower, upper, body_fun, step=1):
    """Runs body_fun(i) for i in range(lower, upper, step). Integer bounds (known when the kernel
    specialises) unroll, which computes what the device loop computes; a register bound runs a
    device loop whose body is traced once and whose i is the induction register."""
    if not (_core._is_int(lower) and _core._is_int(upper)):
        return _loops.fori_loop(lower, upper, body_fun, step)
    if not _core._is_int(step) or int(step) <= 0:
        raise error("nl.fori_loop: step must be a positive integer")
    for i in range(int(lower), int(upper), int(step)):
        if body_fun(i) is not None:
            raise error("nl.fori_loop: the body function cannot return a value")


def while_loop(init, body_fun):
    """Runs body_fun(r) while the condition register is non-zero (tested before each iteration;
    the body returns the next condition): a device loop, its body traced once."""
    return _loops.while_loop(init, body_fun)


@contextlib.contextmanager
def no_reorder():
    """Keeps program order: the interpreter executes in program order anyway, and the timeline
    orders only by dependencies, so this changes nothing here."""
    yield


def program_id(axis=0):
    """This SPMD program's index along `axis` of the launch grid (kernel[grid])."""
    t = _core.current_tracer()
    if not 0 <= axis < len(t.program_coords):
        raise error(f"program_id({axis}): the grid has {len(t.program_coords)} dims")
    return t.program_coords[axis]


def num_programs(axes=0):
    """The number of SPMD programs along `axes` (an int, or a tuple: their product)."""
    t = _core.current_tracer()
    dims = (axes,) if isinstance(axes, int) else tuple(axes)
    for a in dims:
        if not 0 <= a < len(t.grid):
            raise error(f"num_programs({axes}): the grid has {len(t.grid)} dims")
    return math.prod(t.grid[a] for a in dims)


def program_ndim():
    return len(_core.current_tracer().grid)


def device_print(print_prefix, tensor=None, x=None, prefix=None):
    """Prints `print_prefix` and the values of `tensor` when the kernel runs (on the host, after
    the run)."""
    x = tensor if tensor is not None else x
    prefix = print_prefix if prefix is None else prefix
    t = _core.current_tracer()
    if not isinstance(x, Tensor):
        raise error("device_print prints NKI tensors")
    t.emit(OP_PRINT, _core.VECTOR, None, x, text=str(prefix))


# ---------------------------------------------------------------------------------------------
# creation


def _memory(buffer):
    if buffer is None:
        return sbuf
    if isinstance(buffer, _core.MemoryKind):
        return buffer
    raise error(f"buffer must be nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or nl.private_hbm; got "
                f"{buffer!r}")


def ndarray(shape, dtype, buffer=None, name="", address=None, **kwargs):
    """Uninitialised storage (poisoned: NaN for floats, so reads before writes show)."""
    return _core.current_tracer().allocate(shape, dtype, _memory(buffer), name)


def empty_like(x, dtype=None, buffer=None, name="", **kwargs):
    return ndarray(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def full(shape, fill_value, dtype, buffer=None, name="", **kwargs):
    t = ndarray(shape, dtype, buffer, name)
    _isa.memset(dst=t, value=fill_value)
    return t


def zeros(shape, dtype, buffer=None, name="", **kwargs):
    return full(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=None, name="", **kwargs):
    return full(shape, 1, dtype, buffer, name)


def zeros_like(x, dtype=None, buffer=None, name="", **kwargs):
    return zeros(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def ones_like(x, dtype=None, buffer=None, name="", **kwargs):
    return ones(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def full_like(x, fill_value, dtype=None, buffer=None, name="", **kwargs):
    return full(x.shape, fill_value, dtype or x.dtype, buffer or x.buffer, name)


def shared_identity_matrix(n, dtype=uint8, dst=None, **kwargs):
    """An n x n identity in SBUF (built with iota and a comparison)."""
    rows = ndarray((n, n), float32, buffer=sbuf)
    _isa.iota(rows, [[1, n]], offset=0, channel_multiplier=-1)  # j - p
    ident = dst if dst is not None else ndarray((n, n), dtype, buffer=sbuf)
    _isa.tensor_scalar(ident, rows, equal, 0.0)
    return ident


def shared_constant(constant):
    """A shared_hbm tensor holding `constant` (a NumPy array or the path of a .npy file): the
    data travels with the specialised kernel as one more input."""
    import numpy as np

    if isinstance(constant, str):
        constant = np.load(constant)
    arr = np.ascontiguousarray(np.asarray(constant))
    if arr.ndim == 0:
        arr = arr.reshape(1)
    t = _core.current_tracer().allocate(arr.shape, _core.as_dtype(arr.dtype), shared_hbm,
                                        "shared_constant")
    t._buffer.poison = False
    t._buffer.constant = arr
    return t


def expand_dims(x, axis):
    """A view of x with a size-1 dim inserted at `axis`."""
    return x.expand_dim(axis)


def broadcast_to(x, shape, dtype=None):
    """A tile of `shape` holding x broadcast from its size-1 dims (numpy rules, same rank). A
    broadcast along the partition dim moves data between partitions: it goes through a DMA; free
    dims broadcast on the Vector engine."""
    if not isinstance(x, Tensor) or not x._buffer.on_chip:
        raise error("nl.broadcast_to takes an on-chip tile (nl.load it first)")
    shape = tuple(int(s) for s in shape)
    if shape == x.shape and (dtype is None or _core.as_dtype(dtype) == x.dtype):
        return x
    view = Tensor(x._buffer, x.shape, x.strides, x.offset, x._dtype)
    if len(shape) != x.ndim:
        raise error(f"nl.broadcast_to: {shape} must have the rank of {x.shape}")
    strides = []
    for n, m, st in zip(x.shape, shape, x.strides):
        if n != m and n != 1:
            raise error(f"nl.broadcast_to: cannot broadcast {x.shape} to {shape}")
        strides.append(st if n == m else 0)
    view = Tensor(x._buffer, shape, strides, x.offset, x._dtype)
    out = ndarray(shape, dtype or x.dtype, buffer=sbuf)
    if shape[0] != x.shape[0]:
        _isa.dma_copy(dst=out, src=view)
    else:
        _isa.tensor_copy(dst=out, src=view)
    return out


_RNG = ("the hardware random number generator's bit stream is not published, so results "
        "could not be checked against hardware; not supported")


def gather_flattened(data, indices, axis=0, dtype=None):
    """out[p, j...] = data[p, indices[p, j...]], data's free dims flattened: nisa.nc_n_gather on
    the GpSimd engine (uint32 or int32 indices; one outside the partition's elements is an
    error), converted to `dtype` if given."""
    if axis != 0:
        raise error("nl.gather_flattened: only axis=0 (the default: each partition gathers from "
                    "its flattened free dims, as AWS's example uses it) is modelled; the reference "
                    "does not define other axes")
    for what, x in (("data", data), ("indices", indices)):
        if not isinstance(x, Tensor) or not x._buffer.on_chip:
            raise error(f"nl.gather_flattened: {what} must be an on-chip tile (nl.load it first)")
    out = ndarray(indices.shape, data.dtype, buffer=sbuf)
    _isa._n_gather("nl.gather_flattened", out, data, indices, ("uint32", "int32"), None)
    if dtype is None or _core.as_dtype(dtype) == data.dtype:
        return out
    res = ndarray(indices.shape, dtype, buffer=sbuf)
    _isa.tensor_copy(dst=res, src=out)
    return res


def random_seed(seed):
    raise error(_core.REFUSED["nki.language.random_seed"])


def rand(shape, dtype, buffer=sbuf, name=""):
    raise error(_core.REFUSED["nki.language.rand"])


def dropout(x, rate, dtype=None):
    raise error(_core.REFUSED["nki.language.dropout"])


for _name in ("random_seed", "rand", "dropout"):
    _core.refused(f"nki.language.{_name}", f"nl.{_name}: {_RNG}")


# ---------------------------------------------------------------------------------------------
# memory movement


def load(src, dtype=None, mask=None, **kwargs):
    """An SBUF tile holding `src` (an HBM tensor or view, or one placed at run time by a
    register); the partition dim is src's dim 0."""
    placed = isinstance(src, _indirect.IndirectAccess)
    if not isinstance(src, Tensor) and not placed:
        raise error(f"nl.load takes an HBM tensor, got {type(src).__name__}")
    if (src.rows if placed else src)._buffer.on_chip:
        raise error("nl.load reads HBM; this tensor is already on chip (use nl.copy)")
    shape = src.shape if src.ndim >= 2 else (1,) + src.shape if src.ndim == 1 else (1, 1)
    t = ndarray(shape, dtype or src.dtype, buffer=sbuf)
    _isa.dma_copy(dst=t, src=src)
    return t


def store(dst, value, mask=None, **kwargs):
    """Writes an SBUF tile to an HBM tensor or view (either side may be placed at run time by
    a register: a dma_copy with a runtime offset)."""
    placed = isinstance(dst, _indirect.IndirectAccess)
    if not (isinstance(dst, Tensor) or placed) or (dst.rows if placed else dst)._buffer.on_chip:
        raise error("nl.store writes HBM tensors; for on-chip tensors assign or use nl.copy")
    if isinstance(value, _indirect.IndirectAccess) and not placed:
        return _isa.dma_copy(dst=dst, src=value)
    if not isinstance(value, Tensor):
        raise error("nl.store takes an NKI tensor value")
    if value.buffer is psum:
        raise error("nl.store of a PSUM tile: DMA does not read PSUM; copy it to SBUF first "
                    "(nl.copy(tile, dtype=...) or nisa.tensor_copy)")
    _isa.dma_copy(dst=dst, src=value)


def load_transpose2d(src, dtype=None, **kwargs):
    """The transpose of a 2-D HBM tensor, loaded into SBUF (a strided DMA)."""
    if src.ndim != 2:
        raise error("load_transpose2d takes a 2-D HBM tensor")
    return load(src.permute(1, 0), dtype=dtype)


def copy(x, dtype=None, **kwargs):
    """A copy of an on-chip tensor in a fresh SBUF tile (with dtype conversion)."""
    t = ndarray(x.shape, dtype or x.dtype, buffer=sbuf)
    _isa.tensor_copy(dst=t, src=x)
    return t


# ---------------------------------------------------------------------------------------------
# operations (usable as `op=` of nki.isa instructions)


def _left_aligned(x, ndim):
    # On-chip tensors align on the partition dim (dim 0): a [P] tensor against [P, F] is [P, 1].
    if x.ndim == ndim:
        return x
    if x.ndim > ndim:
        raise error(f"operand {x.shape} has more dims than the result")
    pad = ndim - x.ndim
    return Tensor(x._buffer, x.shape + (1,) * pad, x.strides + (0,) * pad, x.offset)


def _broadcast_shape(shapes):
    ndim = builtins.max(len(s) for s in shapes)
    out = []
    for d in range(ndim):
        sizes = {s[d] if d < len(s) else 1 for s in shapes}
        sizes.discard(1)
        if len(sizes) > 1:
            raise error(f"shapes {' and '.join(str(s) for s in shapes)} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _binary(self, x, y, dtype=None, mask=None, **kwargs):
    _indirect.refuse_compute(f"nl.{self.name}: an operand", x, y)
    xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
    if not xt and not yt:
        return self.py(x, y)
    for t in (x, y):
        if isinstance(t, Tensor) and not t._buffer.on_chip:
            raise error(f"nl.{self.name}: an operand is in HBM; load it into SBUF first (nl.load)")
    if xt and yt:
        shape = _broadcast_shape([x.shape, y.shape])
        out = ndarray(shape, dtype or _core.result_dtype(x.dtype, y.dtype), buffer=sbuf)
        xv = _left_aligned(x, len(shape)).broadcast_to(shape)
        yv = _left_aligned(y, len(shape)).broadcast_to(shape)
        if xv.buffer is psum and yv.buffer is psum:
            xv = copy(xv)
        _isa.tensor_tensor(dst=out, data1=xv, data2=yv, op=self)
        return out
    t, s = (x, y) if xt else (y, x)
    out = ndarray(t.shape, dtype or t.dtype, buffer=sbuf)
    _isa.tensor_scalar(dst=out, data=t, op0=self, operand0=s, reverse0=not xt)
    return out


def _unary(self, x, dtype=None, mask=None, **kwargs):
    _indirect.refuse_compute(f"nl.{self.name}: the operand", x)
    if not isinstance(x, Tensor):
        return self.py(x)
    if not x._buffer.on_chip:
        raise error(f"nl.{self.name}: the operand is in HBM; load it into SBUF first (nl.load)")
    out = ndarray(x.shape, dtype or x.dtype, buffer=sbuf)
    _isa.activation(dst=out, op=self, data=x)
    return out


def _reduce(self, x, axis, dtype=None, keepdims=False, mask=None, **kwargs):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a + x.ndim if a < 0 else a for a in axes)
    if any(a <= 0 or a >= x.ndim for a in axes):
        raise error(f"nl.{self.name}: axis {axis} of a {x.ndim}-D tensor: only free dims "
                    f"(1..{x.ndim - 1}) reduce on an engine; the partition dim needs a transpose "
                    "first")
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape)) if keepdims else tuple(
        n for d, n in enumerate(x.shape) if d not in axes)
    out = ndarray(shape, dtype or x.dtype, buffer=sbuf)
    _isa.tensor_reduce(dst=out, op=_ops.REDUCE_ALU[self.name], data=x, axis=axes)
    return out


# nl.copy is both the tile copy above and the identity activation (op=nl.copy).
copy.act = 0
copy.alu = 0
_ops.bind("binary", _binary)
_ops.bind("unary", _unary)
_ops.bind("reduce", _reduce)


def invert(x, dtype=None, **kwargs):
    """Bitwise NOT of an integer tile (an XOR with all ones of its width)."""
    if not isinstance(x, Tensor):
        return ~int(x)
    if x.dtype.is_float:
        raise error(f"nl.invert takes an integer tile, got {x.dtype}")
    mask = -1 if x.dtype.name.startswith("int") else (1 << (8 * x.dtype.itemsize)) - 1
    return bitwise_xor(x, mask, dtype=dtype)


def mean(x, axis, dtype=None, keepdims=False, **kwargs):
    """The mean over free axes (sum, then a multiply by 1/n)."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    n = math.prod(x.shape[a] for a in axes)
    s = sum(x, axis, dtype=float32, keepdims=keepdims)
    out = ndarray(s.shape, dtype or x.dtype, buffer=sbuf)
    _isa.tensor_scalar(dst=out, data=s, op0=multiply, operand0=1.0 / n)
    return out


def var(x, axis, dtype=None, keepdims=False, **kwargs):
    """The population variance over free axes."""
    m = mean(x, axis, dtype=float32, keepdims=True)
    d = subtract(x, m, dtype=float32)
    return mean(multiply(d, d), axis, dtype=dtype or x.dtype, keepdims=keepdims)


def where(condition, x, y, dtype=None, **kwargs):
    """Elementwise condition ? x : y; x and y may be numbers."""
    shape = condition.shape
    out = ndarray(shape, dtype or (x.dtype if isinstance(x, Tensor) else
                                   y.dtype if isinstance(y, Tensor) else float32), buffer=sbuf)

    def as_tile(v):
        if isinstance(v, Tensor):
            return _left_aligned(v, len(shape)).broadcast_to(shape)
        return full(shape, v, float32)

    _isa.select(out, condition, as_tile(x), as_tile(y))
    return out


def matmul(x, y, transpose_x=False, mask=None, **kwargs):
    """x @ y into a fresh float32 PSUM tile on the Tensor engine. With transpose_x, x is already
    [K, M] (the stationary layout); otherwise x is [M, K] and is transposed on the Tensor engine
    first. Limits: K <= 128, M <= 128, N <= 512."""
    for what, t in (("x", x), ("y", y)):
        if not isinstance(t, Tensor) or not t._buffer.on_chip:
            raise error(f"nl.matmul: {what} must be an on-chip tensor (nl.load it first)")
    if y.buffer is psum:
        y = copy(y)
    if not transpose_x:
        xt = ndarray((x.shape[1], x.shape[0]), x.dtype if x.dtype.is_float else float32,
                     buffer=psum)
        xs = x if x.buffer is sbuf else copy(x)
        _isa.nc_transpose(xt, xs)
        x = copy(xt)
    elif x.buffer is psum:
        x = copy(x)
    out = ndarray((x.shape[1], y.shape[1]), float32, buffer=psum)
    out._pending_matmul = _isa.nc_matmul(out, x, y).index
    return out


def transpose(x, dtype=None, **kwargs):
    """The transpose of an on-chip [P, F] tile (P, F <= 128), in PSUM, via the Tensor engine."""
    if not isinstance(x, Tensor) or not x._buffer.on_chip:
        raise error("nl.transpose takes an on-chip tensor (nl.load it first)")
    src = x if x.buffer is sbuf else copy(x)
    out = ndarray((x.shape[1], x.shape[0]), dtype or x.dtype, buffer=psum)
    _isa.nc_transpose(out, src)
    return out


def softmax(x, axis=-1, dtype=None, **kwargs):
    """softmax along the free axis: max (Vector), exp(x - max) with its row sum in the same
    Scalar-engine instruction, reciprocal and scale (Vector)."""
    if axis < 0:
        axis += x.ndim
    if x.ndim != 2 or axis != 1:
        raise error("nl.softmax here takes a 2-D tile and its free axis (axis=1 / -1)")
    p = x.shape[0]
    neg_max = ndarray((p, 1), float32, buffer=sbuf)
    _isa.tensor_reduce(neg_max, maximum, x, axis=1, negate=True)
    e = ndarray(x.shape, float32, buffer=sbuf)
    s = ndarray((p, 1), float32, buffer=sbuf)
    _isa.activation(e, exp, x, bias=neg_max, reduce_op=add, reduce_res=s)
    r = ndarray((p, 1), float32, buffer=sbuf)
    _isa.tensor_scalar(r, s, divide, 1.0, reverse0=True)
    out = ndarray(x.shape, dtype or x.dtype, buffer=sbuf)
    _isa.tensor_scalar(out, e, multiply, r)
    return out


def rms_norm(x, w, axis=-1, n=None, epsilon=1e-6, dtype=None, compute_dtype=None, **kwargs):
    """x / sqrt(mean(x^2) + epsilon) * w along the free axis; w is [1, F] or [P, F] (broadcast
    over partitions as it is read)."""
    if axis < 0:
        axis += x.ndim
    if x.ndim != 2 or axis != 1:
        raise error("nl.rms_norm here takes a 2-D tile and its free axis (axis=1 / -1)")
    p, f = x.shape
    n = n or f
    cd = _core.as_dtype(compute_dtype) if compute_dtype is not None else float32
    sq = ndarray(x.shape, cd, buffer=sbuf)
    ss = ndarray((p, 1), cd, buffer=sbuf)
    _isa.activation(sq, square, x, reduce_op=add, reduce_res=ss)
    rs = ndarray((p, 1), cd, buffer=sbuf)
    _isa.tensor_scalar(rs, ss, multiply, 1.0 / n, op1=add, operand1=float(epsilon))
    inv = ndarray((p, 1), cd, buffer=sbuf)
    _isa.activation(inv, rsqrt, rs)
    normed = ndarray(x.shape, cd, buffer=sbuf)
    _isa.tensor_scalar(normed, x, multiply, inv)
    out = ndarray(x.shape, dtype or x.dtype, buffer=sbuf)
    wv = _left_aligned(w, 2).broadcast_to(x.shape)
    _isa.tensor_tensor(out, normed, wv, multiply)
    return out


# Tensors' Python operators (+ - * / ** @, comparisons, abs, negation) call these.
_core.HOOKS.update({name: globals()[name] for name in (
    "add", "subtract", "multiply", "divide", "power", "negative", "abs", "less", "less_equal",
    "greater", "greater_equal", "matmul")})


def __getattr__(name):
    if name == "range":
        # AWS's NKI library calls nl.range (experimental/mxfp_subkernels), but no published NKI
        # release defines it (docs/nki.md, "AWS's NKI library"): refused rather than guessed.
        raise AttributeError(
            "nki.language.range is not a name of any published NKI release (the 0.6 stub's "
            "iterators are affine_range, sequential_range, static_range and dynamic_range; NKI "
            "0.7 recommends Python's range for loops unrolled at specialisation)")
    raise AttributeError(f"module 'nki.language' has no attribute {name!r}")
