"""``neuronxcc.nki.language`` (the legacy NKI API, NKI 0.1 and the Neuron SDK up to 2.27) on
this project's NKI 0.6 implementation.

What differs from ``nki.language``: index grids (``nl.arange``, ``nl.mgrid``) as indices;
``mask=`` on loads, stores and operations; block dimensions before the partition dim
(``nl.par_dim``); string buffer names; ``num_programs(axes=None)``. Each use is recorded for the
kernel's migration report (nki.legacy.report) with its NKI 0.6 spelling.
"""

from __future__ import annotations

import builtins
import math

from nki import _core, _ops
from nki import isa as _isa
from nki import language as _nl
from nki.language import (  # noqa: F401  (the same in both APIs)
    MemoryRegion, NkiTensor, bfloat16, bool_, device_print, ds, float8_e4m3,
    float8_e4m3fn, float8_e5m2, float16, float32, hbm, int8, int16, int32, no_reorder,
    private_hbm, program_id, program_ndim, psum, sbuf, shared_hbm, tfloat32, tile_size, uint8, uint16, uint32,
)
from nki._core import Tensor, error
from nki.legacy import indirect, report
from nki.legacy.allocation import DirectAllocation
from nki.legacy.indirect import IndirectAccess
from nki.legacy.grids import MASKED_OFF, arange, masked, mgrid, skip_masked_off  # noqa: F401

_MASK = ("mask=", "clip the slices instead: t[p0:min(P, p0 + 128), f0:min(F, f0 + 512)] "
         "(NKI 0.2 removed mask=)")


def _mask(mask):
    if mask is not None:
        report.use(*_MASK)
    return mask


# ---------------------------------------------------------------------------------------------
# block dimensions


class par_dim(int):
    """``nl.par_dim(n)``: marks the partition dim of a shape; dims before it are block dims."""

    def __new__(cls, n):
        return int.__new__(cls, n)


class BlockTensor:
    """An on-chip tensor with block dims before its partition dim (``(B, par_dim(P), F)``): a
    grid of independent [P, F...] tiles, each allocated when first used, as NKI's allocator
    treats block dims (NKI 0.6 spells it as a Python list of tiles).

    Indexing fewer block dims than it has, or block dims with slices (``t[h]``, ``t[0:2, i]``),
    gives a view over the same tiles (the legacy API passes such sub-tensors to helpers)."""

    def __init__(self, blocks, tile_shape, dtype, buffer, fill=None, _tiles=None, _dims=None,
                 allocation=None, name=""):
        self.tile_shape = tuple(tile_shape)
        self.dtype = _core.as_dtype(dtype)
        self.buffer = buffer
        self.fill = fill
        self.allocation = allocation  # ncc.sbuf / ncc.psum placement of each tile, if given
        self.name = name
        self.tiles = {} if _tiles is None else _tiles
        # One entry per block dim of the allocation: a fixed int, or the range this view spans.
        self._dims = [range(int(n)) for n in blocks] if _dims is None else _dims
        self.blocks = tuple(len(d) for d in self._dims if isinstance(d, range))

    @property
    def shape(self):
        return self.blocks + self.tile_shape

    @property
    def ndim(self):
        return len(self.shape)

    def _block_key(self, d, k):
        n = self.blocks[d]
        if isinstance(k, slice):
            return range(*_core.static_slice_indices(k, n, f"block dim {d}"))
        if not _core._is_int(k):
            raise error(f"index block dim {d} of a par_dim tensor with an integer (a loop "
                        f"variable) or a slice, not {type(k).__name__}")
        i = int(k)
        if not 0 <= i < n:
            raise error(f"block index {i} is out of range for block dim {d} of size {n} "
                        f"(blocks {self.blocks})")
        return i

    def _view(self, index):
        """The tile at `index` (ints on every block dim) or a view over the blocks it selects."""
        keys = iter(self._block_key(d, k) for d, k in enumerate(index))
        dims = []
        for d in self._dims:
            if isinstance(d, range):
                k = next(keys, None)
                if isinstance(k, int):
                    d = d[k]
                elif k is not None:
                    d = range(d.start + k.start * d.step, d.start + k.stop * d.step,
                              k.step * d.step)
            dims.append(d)
        if builtins.all(isinstance(d, int) for d in dims):
            return self._tile(tuple(dims))
        return BlockTensor((), self.tile_shape, self.dtype, self.buffer, self.fill,
                           _tiles=self.tiles, _dims=dims, allocation=self.allocation,
                           name=self.name)

    def _tile(self, index):
        t = self.tiles.get(index)
        if t is None:
            t = _nl.ndarray(self.tile_shape, self.dtype, buffer=self.buffer)
            if self.allocation is not None:
                self.allocation.place(t, index, self.name)
            if self.fill is not None:
                _isa.memset(dst=t, value=self.fill)
            self.tiles[index] = t
        return t

    def _split(self, key):
        key = key if isinstance(key, tuple) else (key,)
        nb = len(self.blocks)
        return self._view(key[:nb]), key[nb:]

    def __getitem__(self, key):
        sub, rest = self._split(key)
        if not rest:
            return sub
        if isinstance(sub, BlockTensor):
            if builtins.all(isinstance(k, slice) and k == slice(None) for k in rest):
                return sub
            raise error("a par_dim tensor indexed with a slice on a block dim can be narrowed "
                        "on its tile dims only after its block dims are integers")
        return sub[rest]

    def __setitem__(self, key, value):
        sub, rest = self._split(key)
        if isinstance(sub, BlockTensor):
            raise error("assign to one tile of a par_dim tensor at a time: index every block "
                        f"dim with an integer (blocks {self.blocks})")
        sub[rest if rest else ...] = value


def _alloc(shape, dtype, buffer, name, fill):
    allocation = None
    if isinstance(buffer, DirectAllocation):
        allocation, buffer = buffer, buffer.memory
    if isinstance(buffer, str):
        report.use(f"buffer='{buffer}'", f"buffer=nl.{buffer} (NKI 0.3 dropped string buffer "
                   "names)")
        buffer = getattr(_nl, buffer)
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    pdims = [i for i, s in enumerate(shape) if isinstance(s, par_dim)]
    if pdims and pdims[0] > 0:
        report.use("nl.par_dim block dims", "a Python list of [P, F] tiles, or the block dims "
                   "folded into the free dims ([P, B, F]); see AWS's block-dimension migration "
                   "guide")
        return BlockTensor(shape[:pdims[0]], shape[pdims[0]:], dtype, buffer or sbuf, fill,
                           allocation=allocation, name=name)
    if pdims:
        report.use("nl.par_dim", "drop nl.par_dim: dim 0 is always the partition dim")
    t = _nl.ndarray(tuple(int(s) for s in shape), dtype, buffer=buffer or sbuf, name=name)
    if allocation is not None:
        allocation.place(t, (), name)
    if fill is not None:
        _isa.memset(dst=t, value=fill)
    return t


def ndarray(shape, dtype, buffer=None, name="", **kwargs):
    return _alloc(shape, dtype, buffer, name, None)


def zeros(shape, dtype, buffer=None, name="", **kwargs):
    return _alloc(shape, dtype, buffer, name, 0)


def ones(shape, dtype, buffer=None, name="", **kwargs):
    return _alloc(shape, dtype, buffer, name, 1)


def full(shape, fill_value, dtype, buffer=None, name="", **kwargs):
    return _alloc(shape, dtype, buffer, name, fill_value)


def zeros_like(a, dtype=None, buffer=None, name="", **kwargs):
    return zeros(a.shape, dtype or a.dtype, buffer or a.buffer, name)


def empty_like(a, dtype=None, buffer=None, name="", **kwargs):
    return ndarray(a.shape, dtype or a.dtype, buffer or a.buffer, name)


def ones_like(a, dtype=None, buffer=None, name="", **kwargs):
    return ones(a.shape, dtype or a.dtype, buffer or a.buffer, name)


def full_like(a, fill_value, dtype=None, buffer=None, name="", **kwargs):
    return full(a.shape, fill_value, dtype or a.dtype, buffer or a.buffer, name)


# ---------------------------------------------------------------------------------------------
# loads, stores and operations with masks


def _keep_axes(out, like):
    grid = getattr(like, "_grid_axes", None)
    if grid is not None and isinstance(out, Tensor) and len(grid) == out.ndim:
        out._grid_axes = grid
    return out


@skip_masked_off
def load(src, mask=None, dtype=None, **kwargs):
    """A fresh SBUF tile holding src (an HBM view, possibly indexed by grids)."""
    src = masked(src, _mask(mask))
    if isinstance(src, IndirectAccess):
        return indirect.gather(src, dtype)
    return _keep_axes(_nl.load(src, dtype=dtype), src)


@skip_masked_off
def store(dst, value, mask=None, **kwargs):
    mask = _mask(mask)
    dst, value = masked(dst, mask), masked(value, mask)
    if isinstance(dst, IndirectAccess):
        from nki.legacy.isa import _in_sbuf

        indirect.scatter(dst, _in_sbuf(value, "store", "value", "DMA", api="nl"))
        return
    if isinstance(dst, Tensor) and dst.ndim == 0:
        dst = dst.reshape((1,))  # one element of an HBM tensor (out[b, h]) from a 1-element tile
    if isinstance(value, Tensor) and value.shape != dst.shape and value.numel() == dst.numel():
        if dst.ndim < value.ndim and not dst._buffer.on_chip and dst.is_contiguous():
            dst = dst.reshape(value.shape)  # one HBM element (or row) from a [P, F] tile
        elif value.is_contiguous():
            value = value.reshape(dst.shape)
    from nki.legacy.isa import _in_sbuf

    _nl.store(dst, _in_sbuf(value, "store", "value", "DMA", api="nl"))


@skip_masked_off
def load_transpose2d(src, mask=None, dtype=None, **kwargs):
    return _nl.load_transpose2d(masked(src, _mask(mask)), dtype=dtype)


class LegacyOp:
    """An nl operation that also takes ``mask=`` (and is still an ``op=`` for nisa calls)."""

    def __init__(self, op):
        self._op = op
        self.name, self.alu, self.act = op.name, op.alu, op.act

    @skip_masked_off
    def __call__(self, *args, mask=None, **kwargs):
        mask = _mask(mask)
        args = [masked(a, mask) for a in args]
        out = self._op(*args, **kwargs)
        return _keep_axes(out, next((a for a in args if isinstance(a, Tensor)), None))

    def __repr__(self):
        return repr(self._op)


for _op in _ops.ALL:
    globals()[_op.name] = LegacyOp(_op)


def _with_mask(fn):
    @skip_masked_off
    def wrapped(*args, mask=None, **kwargs):
        mask = _mask(mask)
        args = [masked(a, mask) for a in args]
        kwargs = {k: masked(v, mask) for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


copy = _with_mask(_nl.copy)
copy.act = copy.alu = 0  # op=nl.copy (the identity activation)
invert = _with_mask(_nl.invert)
mean = _with_mask(_nl.mean)
var = _with_mask(_nl.var)
where = _with_mask(_nl.where)
matmul = _with_mask(_nl.matmul)
transpose = _with_mask(_nl.transpose)
softmax = _with_mask(_nl.softmax)
rms_norm = _with_mask(_nl.rms_norm)
broadcast_to = _with_mask(_nl.broadcast_to)
expand_dims = _nl.expand_dims


def shared_constant(constant, dtype=None, **kwargs):
    """The legacy ``nl.shared_constant(constant, dtype=None)``: the constant converted value by
    value to `dtype` (NKI 0.6 takes the array in the dtype it should have)."""
    if dtype is None:
        return _nl.shared_constant(constant)
    import numpy as np

    report.use("nl.shared_constant(constant, dtype=...)",
               "nl.shared_constant(constant.astype(<NumPy dtype>)) (NKI 0.6 takes no dtype=)")
    if isinstance(constant, str):
        constant = np.load(constant)
    return _nl.shared_constant(static_cast(np.asarray(constant), dtype))
shared_identity_matrix = _nl.shared_identity_matrix


class _Loop:
    """The iterations of an nl.affine_range / sequential_range / static_range, unrolled as every
    loop is here, with the loop (its source line, and the iteration where AWS's tracer unrolls it
    too) on the tracer's loop stack while its body runs: AWS's tracer traces an affine or
    sequential loop's body once, so a statement in it is one allocation however many times it
    runs (nki.legacy.allocation keys placements by it); static_range unrolls, each iteration its
    own. Iterable more than once, like the range it stands for."""

    def __init__(self, bounds, static):
        self.range = range(*bounds)
        self.static = static
        self.location = _core.caller_location()

    def __len__(self):
        return len(self.range)

    def __repr__(self):
        return f"<legacy loop {self.range}>"

    def __iter__(self):
        tracer = _core.current_tracer(optional=True)
        if tracer is None:
            yield from self.range
            return
        stack = tracer.__dict__.setdefault("legacy_loops", [])
        entry = [self.location, self.static, None]
        stack.append(entry)
        try:
            for i in self.range:
                entry[2] = i
                yield i
        finally:
            if entry in stack:
                stack.remove(entry)


def _loop(bounds, static):
    return _Loop(bounds, static)


def _bounds(start, stop, step):
    return (start, stop, step) if stop is not None else (start,)


def affine_range(start, stop=None, step=1, **kwargs):
    return _loop(_bounds(start, stop, step), static=False)


def sequential_range(start, stop=None, step=1, **kwargs):
    return _loop(_bounds(start, stop, step), static=False)


def static_range(start, stop=None, step=1, **kwargs):
    return _loop(_bounds(start, stop, step), static=True)


def num_programs(axes=None):
    """The launch grid's size along `axes`; legacy None (all dims) is their product."""
    if axes is None:
        return math.prod(_core.current_tracer().grid)
    return _nl.num_programs(axes)


def spmd_dim(*args, **kwargs):
    raise error("nl.spmd_dim (a launch grid over several NeuronCores) is not supported; launch "
                "kernel[grid] and split work with nl.program_id")


class _LoopReduction:
    """``dst[...] = nl.loop_reduce(x, op, loop_indices)``: dst = x op dst. The destination is
    also the reduction's right operand (AWS's loop_reduce reference); loops unroll here, so the
    reduction across iterations is this accumulation repeated."""

    def __init__(self, x, op):
        self.x, self.op = x, op

    def _assign_into(self, dst):
        _isa.tensor_tensor(dst=dst, data1=self.x, data2=dst, op=self.op)


@skip_masked_off
def loop_reduce(x, op, loop_indices, mask=None, dtype=None, **kwargs):
    report.use("nl.loop_reduce", "accumulate explicitly: nisa.tensor_tensor(dst=acc, data1=x, "
               "data2=acc, op=...) (or acc += x)")
    x = masked(x, _mask(mask))
    if not isinstance(x, Tensor):
        raise error("nl.loop_reduce reduces a tile; got " + type(x).__name__)
    return _LoopReduction(x, op)


def static_cast(ndarray, dtype):
    """The legacy host helper ``nl.static_cast(array, dtype)``: a NumPy array converted value by
    value to ``dtype`` (an NKI or NumPy dtype; bfloat16 / float8 through ml_dtypes), as the
    earlier API's test harnesses use it to make kernel inputs."""
    import numpy as np

    from nki._jit import _np_dtype

    try:
        nki_dtype = _core.as_dtype(dtype)
    except Exception:  # a NumPy dtype the NKI dtypes do not name
        return np.asarray(ndarray).astype(np.dtype(dtype))
    return np.asarray(ndarray).astype(_np_dtype(nki_dtype))


def finfo(dtype):
    """The legacy ``nl.finfo(dtype)``: the floating-point limits of an NKI dtype (``.min``,
    ``.max``, ``.eps``, ``.tiny``, ``.bits``), as NumPy / ml_dtypes give them."""
    import numpy as np

    from nki._jit import _np_dtype

    target = _np_dtype(_core.as_dtype(dtype))
    if target.kind != "f":
        try:
            import ml_dtypes

            return ml_dtypes.finfo(target)
        except (ImportError, ValueError):
            raise error(f"finfo: {dtype} is not a floating-point dtype") from None
    return np.finfo(target)


class fp32:
    """The legacy ``nl.fp32`` constants: ``nl.fp32.min`` is float32's lowest finite value (what
    kernels of the earlier API fill running maxima with)."""

    min = -3.4028234663852886e38
    max = 3.4028234663852886e38
