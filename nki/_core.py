"""The tracing core of the ``nki`` package: dtypes, buffers, tensors (views of buffers), the
tracer that records ISA instructions with their source lines, and the hardware rules checked while
a kernel specialises.

A kernel is specialised once per (shapes, dtypes, constants): its Python body runs with symbolic
tensors, every ``nl`` / ``nisa`` call appends instructions to the tracer, and the resulting flat
instruction list goes to the runtime's interpreter (``csrc/runtime/nki``). Nothing here touches
data.
"""

from __future__ import annotations

import bisect
import math
import os
import sys
import threading
import warnings

from nki import _nki

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Frames in these directories are the API's own, not the kernel's: nki, its legacy API and the
# neuronxcc.nki alias package.
_API_DIRS = {_PACKAGE_DIR, os.path.join(_PACKAGE_DIR, "legacy"),
             os.path.join(os.path.dirname(_PACKAGE_DIR), "neuronxcc"),
             os.path.join(os.path.dirname(_PACKAGE_DIR), "neuronxcc", "nki")}


class NkiError(ValueError):
    """A kernel broke a rule of the NKI language or of the NeuronCore it specialises for. The
    message starts with the kernel's ``file:line``."""


def loaded_torch(needed_by=None):
    """torch when this process has imported it, else None: nki never imports torch itself (it
    stands alone; torch's tensors can only reach it from a process that imported torch).
    `needed_by`: what cannot run without it; a process without torch is then an NkiError naming
    it, instead of None."""
    torch = sys.modules.get("torch")
    if torch is None and needed_by:
        raise NkiError(f"{needed_by} exchanges tiles through torch.distributed, and this process "
                       "has not imported torch (import torch and initialise the process group "
                       "first)")
    return torch


# Names of the NKI 0.6 API this interpreter refuses (with the reason its error gives) or
# implements only in part (what is refused): the conformance table in docs/nki.md reads them.
REFUSED = {}
PARTIAL = {
    "nki.language.NkiTensor.indirect": "tensor indirection runs on the operands AWS's stub "
                                       "documents, except nc_matmul's dst (a PSUM scatter) and "
                                       "nc_matmul_mx's operands, refused",
    "nki.language.fori_loop": "a register bound runs a device loop, an integer one unrolls; a "
                              "device loop of a multi-program (LNC=2) launch may not hold a "
                              "cross-core synchronisation (core_barrier / sendrecv)",
    "nki.language.dynamic_range": "a register bound runs a device loop, an integer one "
                                  "unrolls; a device loop of a multi-program (LNC=2) launch may "
                                  "not hold a cross-core synchronisation (core_barrier / "
                                  "sendrecv)",
    "nki.isa.dma_copy": "dge_mode, priority and engine do not change the modelled time",
    "nki.isa.tensor_scalar_cumulative": "op1=nl.subtract is refused: AWS's reference writes the "
                                        "step as op1(x, r), and nothing published says whether "
                                        "x - r or r - x is meant",
    "nki.isa.sendrecv": "dma_engine=gpsimd_dma is checked (partitions, bytes per partition) but "
                        "timed as the standard DMA path; both cores must use their pipes in the "
                        "same order (one pipe_id cannot overtake another)",
    "nki.language.gather_flattened": "axis other than 0 (the default, a gather along each "
                                     "partition's flattened free dims) is refused: the "
                                     "reference defines no other",
}


# What tensors' operators and assignments call: nki.isa installs its instructions (dma_copy,
# tensor_copy, memset, tensor_tensor, tensor_scalar) and nki.language its operations (add,
# matmul, ...) when they are imported, so this module imports neither.
HOOKS = {}


def refused(qualname, reason):
    REFUSED[qualname] = reason
    return reason


# ---------------------------------------------------------------------------------------------
# dtypes


class DType:
    """A storage format of NKI tensors (``nl.float32``, ``nl.bfloat16``, ...)."""

    def __init__(self, name, code, itemsize, is_float):
        self.name = name
        self.code = code  # nrtsim::nki::DType
        self.itemsize = itemsize
        self.is_float = is_float

    def __repr__(self):
        return self.name

    def __eq__(self, other):
        try:
            other = as_dtype(other)
        except (TypeError, NkiError):
            return False
        return self.code == other.code

    def __hash__(self):
        return hash(self.code)

    def __str__(self):
        return self.name

    @property
    def packed(self):
        """An MX x4 format: one element holds four values."""
        return self.code in MX_PACKED

    @property
    def dtype(self):
        """The NumPy dtype (``np.dtype(nl.float32)``, ``x.astype(nl.bfloat16)``; bfloat16 and
        float8 through ml_dtypes, when installed)."""
        import numpy as np

        name = {"bool_": "bool", "tfloat32": "float32"}.get(self.name, self.name)
        try:
            return np.dtype(name)
        except TypeError:
            try:
                import ml_dtypes  # noqa: F401  (registers bfloat16 / float8 with NumPy)

                return np.dtype(name)
            except (ImportError, TypeError):
                if self.code in MX_PACKED:
                    raise NkiError(f"NumPy has no {self.name}: no NumPy dtype holds four packed "
                                   "MX values (ml_dtypes has none either); pass torch tensors "
                                   "of this dtype") from None
                raise NkiError(f"NumPy has no {self.name} (install ml_dtypes for bfloat16 / "
                               "float8)") from None


float32 = DType("float32", 0, 4, True)
tfloat32 = DType("tfloat32", 0, 4, True)  # stored as float32; the Tensor engine reads 19 bits
bfloat16 = DType("bfloat16", 1, 2, True)
float16 = DType("float16", 2, 2, True)
float8_e4m3 = DType("float8_e4m3", 3, 1, True)
float8_e4m3fn = DType("float8_e4m3fn", 4, 1, True)
float8_e5m2 = DType("float8_e5m2", 5, 1, True)
int32 = DType("int32", 6, 4, False)
uint32 = DType("uint32", 7, 4, False)
int16 = DType("int16", 8, 2, False)
uint16 = DType("uint16", 9, 2, False)
int8 = DType("int8", 10, 1, False)
uint8 = DType("uint8", 11, 1, False)
bool_ = DType("bool_", 11, 1, False)  # stored as uint8
# The MX formats of NeuronCore-v4 (OCP Microscaling): a power-of-two scale byte, and elements that
# pack four FP8 values in 32 bits or four FP4 values in 16 bits (the first value in the lowest
# bits). An x4 element is one unit of a tensor's shape; only nc_matmul_mx, quantize_mx, copies and
# a zero memset understand what is inside.
float8_e8m0fnu = DType("float8_e8m0fnu", 12, 1, True)
float8_e5m2_x4 = DType("float8_e5m2_x4", 13, 4, True)
float8_e4m3fn_x4 = DType("float8_e4m3fn_x4", 14, 4, True)
float4_e2m1fn_x4 = DType("float4_e2m1fn_x4", 15, 2, True)
MX_PACKED = (13, 14, 15)

_BY_NAME = {
    d.name: d
    for d in (float32, tfloat32, bfloat16, float16, float8_e4m3, float8_e4m3fn, float8_e5m2,
              int32, uint32, int16, uint16, int8, uint8, bool_, float8_e8m0fnu, float8_e5m2_x4,
              float8_e4m3fn_x4, float4_e2m1fn_x4)
}
_BY_NAME.update({"bool": bool_, "float": float32, "half": float16, "float8_e4m3fnuz": None})
_WIDE = {"float64": "float32", "int64": "int32", "uint64": "uint32", "double": "float32",
         "long": "int32", "complex64": None, "complex128": None}


def as_dtype(x) -> DType:
    """An NKI dtype from an ``nl`` dtype, a NumPy dtype (ml_dtypes' bfloat16 / float8 too), a
    torch dtype or a name."""
    if isinstance(x, DType):
        return x
    name = getattr(x, "name", None) if not isinstance(x, str) else x
    if name is None:
        name = str(x)
    name = str(name).replace("torch.", "").replace("numpy.", "")
    if name.startswith("<class"):
        name = name.split("'")[1].split(".")[-1]
    d = _BY_NAME.get(name)
    if d is not None:
        return d
    if name in _WIDE:
        hint = f"; cast to {_WIDE[name]} first" if _WIDE[name] else ""
        raise NkiError(f"dtype {name} is not supported by NeuronCores (no 64-bit or complex "
                       f"data path){hint}")
    raise NkiError(f"unknown dtype {x!r}; NKI dtypes are {', '.join(sorted(k for k, v in _BY_NAME.items() if v))}")


def result_dtype(*dtypes) -> DType:
    """The dtype of an elementwise result: the operands' if they agree, else float32 (the
    engines' internal precision)."""
    ds = [d for d in dtypes if d is not None]
    if ds and all(d.code == ds[0].code for d in ds):
        return ds[0]
    return float32


# ---------------------------------------------------------------------------------------------
# memories, engines and targets


class MemoryKind:
    def __init__(self, name, code):
        self.name = name
        self.code = code  # nrtsim::nki::Memory

    def __repr__(self):
        return self.name


sbuf = MemoryKind("sbuf", 1)
psum = MemoryKind("psum", 2)
hbm = MemoryKind("hbm", 0)
shared_hbm = MemoryKind("shared_hbm", 0)
private_hbm = MemoryKind("private_hbm", 0)

# nrtsim::Engine
TENSOR, VECTOR, SCALAR, GPSIMD, DMA = 0, 1, 2, 3, 4
ENGINE_NAMES = ("tensor", "vector", "scalar", "gpsimd", "dma")

# nrtsim::nki::Opcode
(OP_DMA, OP_COPY, OP_TT, OP_TS, OP_ACT, OP_REDUCE, OP_MATMUL, OP_TRANSPOSE, OP_IOTA, OP_MEMSET,
 OP_SELECT, OP_PRINT, OP_SCAN, OP_PARTITION_REDUCE, OP_AFFINE_SELECT, OP_BN_STATS, OP_BN_AGGR,
 OP_MAX8, OP_FIND_INDEX8, OP_MATCH_REPLACE8, OP_QUANTIZE_MX, OP_MATMUL_MX, OP_CUMULATIVE,
 OP_SELECT_REDUCE, OP_RANGE_SELECT, OP_NONZERO_WITH_COUNT, OP_SEQUENCE_BOUNDS, OP_STREAM_SHUFFLE,
 OP_LOCAL_GATHER, OP_N_GATHER, OP_DMA_COMPUTE, OP_ACTIVATE2, OP_TOPK,
 OP_DMA_INDIRECT, OP_BARRIER, OP_LOOP_BEGIN, OP_LOOP_END, OP_COLLECTIVE,
 OP_TENSOR_INDIRECT) = range(39)
LOOP_MARKERS = (OP_LOOP_BEGIN, OP_LOOP_END)
# Instructions that write only part of their destination (the rest keeps its contents): an
# assignment of their fresh result is a copy of the whole tile, never folded into them.
PARTIAL_WRITE_OPS = (OP_NONZERO_WITH_COUNT, OP_STREAM_SHUFFLE, OP_TOPK)
# Instructions that take MX x4 operands (the rest refuse them).
PACKED_OPS = (OP_DMA, OP_COPY, OP_MEMSET, OP_QUANTIZE_MX, OP_MATMUL_MX)

# The hardware data file the runtime reads (torch_neuronx/data/neuron_cores.ini, shipped beside
# this package; NRTSIM_ENGINE_MODEL overrides it, as for the runtime): the interpreter times
# kernels with its core figures, and the tile geometry below comes from it.
ENGINE_MODEL_PATH = os.path.join(os.path.dirname(_PACKAGE_DIR), "torch_neuronx", "data",
                                 "neuron_cores.ini")
_nki.set_engine_model_path(ENGINE_MODEL_PATH)

# Per NeuronCore version: its chip section of the data file, whose tile geometry (runtime/
# TensorTiles.h) gives each target's SBUF bytes per partition and the moving free size limit
# of one matmul.
TARGETS = {
    name: dict(version=version, chip=chip,
               sbuf_partition_bytes=_nki.tensor_tiles(chip)["sbuf_partition_bytes"],
               moving_fmax=_nki.tensor_tiles(chip)["tensor_moving_columns"])
    for name, version, chip in (("trn1", 2, "Trainium1"), ("trn2", 3, "Trainium2"),
                                ("trn3", 4, "Trainium3"))
}


def _same_on_every_target(key):
    """A figure of the data file that NKI's API states as one constant (nl.tile_size.pmax, ...):
    refused if the file gives the targets different values."""
    values = {name: _nki.tensor_tiles(t["chip"])[key] for name, t in TARGETS.items()}
    if len(set(values.values())) != 1:
        raise NkiError(f"{ENGINE_MODEL_PATH}: {key} differs between NeuronCore targets {values}; "
                       f"NKI states it as one constant")
    return next(iter(values.values()))


PMAX = _same_on_every_target("tensor_partitions")
STATIONARY_FMAX = _same_on_every_target("tensor_stationary_columns")
PSUM_BANK_BYTES = _same_on_every_target("psum_bank_bytes")
PSUM_BANKS = _same_on_every_target("psum_banks")


# ---------------------------------------------------------------------------------------------
# source locations


def caller_location():
    """(file, line) of the innermost frame outside this package: the kernel's own line."""
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) in _API_DIRS:
        f = f.f_back
    if f is None:
        return ("<unknown>", 0)
    return (f.f_code.co_filename, f.f_lineno)


def error(message, location=None):
    tracer = current_tracer(optional=True)
    file, line = location or caller_location()
    kernel = f" in kernel '{tracer.name}'" if tracer is not None else ""
    return NkiError(f"{file}:{line}{kernel}: {message}")


# ---------------------------------------------------------------------------------------------
# buffers and tensors


class Buffer:
    """Storage the kernel touches: a kernel argument or output in HBM, HBM scratch, or an on-chip
    tile in SBUF / PSUM."""

    def __init__(self, tracer, memory, shape, dtype, name, binding=-1, poison=True):
        self.id = len(tracer.buffers)
        self.memory = memory
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name
        self.indirection = None  # (data, index, num_elem, where) of a tensor-indirection view
        self.binding = binding
        self.poison = poison
        self.location = caller_location()
        self.elements = math.prod(self.shape)
        self.internal = False  # engine accumulators, spill homes: not the kernel's allocations
        tracer.buffers.append(self)

    @property
    def on_chip(self):
        return self.memory.code != 0

    def partition_bytes(self):
        return math.prod(self.shape[1:]) * self.dtype.itemsize


def _contiguous_strides(shape):
    strides, s = [], 1
    for n in reversed(shape):
        strides.append(s)
        s *= n
    return tuple(reversed(strides))


def _class_attribute(cls, name):
    """Whether `name` is a plain (data) class attribute of cls: a field NKI accepts by keyword
    even unannotated."""
    if name.startswith("__"):
        return False
    for klass in cls.__mro__[:-1]:
        if name in vars(klass):
            value = vars(klass)[name]
            return not (callable(value) or isinstance(value, (property, staticmethod,
                                                              classmethod)))
    return False


def _dataclass_made_init(cls, fields):
    """Whether cls's own __init__ is the one @dataclass generated (its parameters are the init
    fields), not one the class defines (AWS's MLPParameters sets its derived fields there)."""
    import inspect

    init = vars(cls).get("__init__")
    if init is None:
        return False
    try:
        params = list(inspect.signature(init).parameters)[1:]
    except (TypeError, ValueError):
        return False
    return params == [name for name, f in fields.items() if f.init]


def _dataclass_field_missing(fields, args, kwargs):
    import dataclasses

    given = set(list(fields)[:len(args)]) | set(kwargs)
    return any(f.init and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING and name not in given
               for name, f in fields.items())


class _NKIObjectType(type):
    # ``@dataclass`` over a class whose fields are unannotated class attributes (AWS's
    # attention_cte: ``section_idx = None``) generates an __init__ without them, and one that
    # requires every field without a default (AWS's mlp_tkg builds its dimension sizes without
    # remainderIFused); NKI builds such an object by keyword over its class attributes and
    # leaves a field not given unset, so those calls go to NKIObject's own.
    def __call__(cls, *args, **kwargs):
        fields = getattr(cls, "__dataclass_fields__", None)
        if fields is not None and _dataclass_made_init(cls, fields) and (
                any(k not in fields and _class_attribute(cls, k) for k in kwargs)
                or _dataclass_field_missing(fields, args, kwargs)):
            obj = cls.__new__(cls)
            NKIObject.__init__(obj, *args, **kwargs)
            return obj
        return super().__call__(*args, **kwargs)


class NKIObject(metaclass=_NKIObjectType):
    """Base class of the objects a kernel may build (NKI 0.6 ``nl.NKIObject``): user classes
    inherit from it and behave like dataclasses, with or without ``@dataclass``: construction by
    position or keyword over the annotated fields, or by keyword over the other data class
    attributes (defaults from the class), field-wise equality. A field given no value and having
    no default stays unset until the object sets it (AWS's library declares derived fields that
    a method fills in, e.g. the MoE kernels' DimensionSizes.I_TP_sharded); reading it before is an
    AttributeError."""

    def __init__(self, *args, **kwargs):
        fields = []
        for klass in reversed(type(self).__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if name not in fields:
                    fields.append(name)
        fields += [k for k in kwargs if k not in fields and _class_attribute(type(self), k)]
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__} takes {len(fields)} fields, got {len(args)}")
        values = dict(zip(fields, args))
        for k, v in kwargs.items():
            if k in values:
                raise TypeError(f"{type(self).__name__}: {k} given twice")
            values[k] = v
        for name in fields:
            if name not in values and hasattr(type(self), name):
                values[name] = getattr(type(self), name)
        for k, v in values.items():
            object.__setattr__(self, k, v)
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return vars(self) == vars(other)

    __hash__ = object.__hash__

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"




class DynamicSlice:
    """``nl.ds(start, size)``: `size` elements from `start` along one dim."""

    def __init__(self, start, size):
        if getattr(start, "_is_register", False) and _is_int(size):
            # A runtime start (a VirtualRegister): a dynamic slice of an HBM tensor, which
            # Tensor.__getitem__ makes a scalar-offset access.
            self.start, self.size = start, int(size)
            if self.size <= 0:
                raise error(f"nl.ds({start!r}, {size}): size must be positive")
            return
        if not _is_int(start) or not _is_int(size):
            raise error(f"nl.ds({start!r}, {size!r}): start must be an integer known when the "
                        "kernel specialises or a VirtualRegister, size an integer")
        self.start, self.size = int(start), int(size)
        if self.size < 0:
            raise error(f"nl.ds({start}, {size}): size must not be negative")

    def as_slice(self):
        return slice(self.start, self.start + self.size)

    def __repr__(self):
        return f"nl.ds({self.start}, {self.size})"


def _is_int(x):
    return isinstance(x, int) or (hasattr(x, "__index__") and not isinstance(x, float))


def static_slice_indices(key, size, where):
    """``key.indices(size)`` for a slice whose bounds must be known when the kernel specialises
    (a register or tile as a bound is an error naming ``where``)."""
    for v in (key.start, key.stop, key.step):
        if v is not None and not _is_int(v):
            raise error(f"{where}: slice bound {v!r} is not an integer known when the kernel "
                        "specialises")
    return key.indices(size)


class RuntimeOffset:
    """The offset of an on-chip view placed at run time: ``base`` elements (known when the kernel
    specialises) plus ``stride`` elements per unit of an integer the kernel holds when the
    instruction runs (``index``: a [1, 1] int32 view of a register or of an SBUF tile), that
    integer valid in [0, count). Views of such a view keep it (static offsets add to ``base``);
    the instruction that takes the view reads the integer every time it runs, checks it and
    places the operand (Program.h's RuntimeOffset). One per view: AWS's indirect views "cannot be
    re-indirected"."""

    __slots__ = ("base", "index", "stride", "count")

    def __init__(self, base, index, stride, count):
        self.base, self.index, self.stride, self.count = int(base), index, int(stride), int(count)

    def _moved(self, k):
        if isinstance(k, RuntimeOffset):
            raise error("one runtime offset per access: this view is already placed at run time "
                        "(AWS: an indirect view cannot be re-indirected)")
        if not _is_int(k):
            return NotImplemented
        return RuntimeOffset(self.base + int(k), self.index, self.stride, self.count)

    __add__ = __radd__ = _moved

    def __sub__(self, k):
        return self._moved(-int(k)) if _is_int(k) else NotImplemented

    # The partition a view starts at and its place in the partition, for the rules checked
    # while tracing: the runtime part stays inside the partition's row (a free-dim offset).
    def __floordiv__(self, k):
        return self.base // int(k)

    def __mod__(self, k):
        return self.base % int(k)

    def _scaled(self, *_):
        raise error("this view is placed at run time (a runtime offset); it cannot be "
                    "reinterpreted as another dtype or given a new access pattern (AWS: view() "
                    "and .ap() are not supported after a dynamic select)")

    __mul__ = __rmul__ = __int__ = _scaled

    def __eq__(self, other):
        return (isinstance(other, RuntimeOffset) and other.base == self.base
                and other.stride == self.stride and other.count == self.count
                and other.index.same_view(self.index))

    def __hash__(self):
        return hash((self.base, self.stride, self.count, self.index._buffer.id))

    def __repr__(self):
        return f"<offset {self.base} + {self.stride} x runtime index in [0, {self.count})>"


def static_offset(offset):
    """The part of a view's offset known when the kernel specialises."""
    return offset.base if isinstance(offset, RuntimeOffset) else offset


def _runtime_index(k):
    """Whether an index is placed at run time: a register, or nl.ds with a register start."""
    return getattr(k, "_is_register", False) or (
        isinstance(k, DynamicSlice) and getattr(k.start, "_is_register", False))


class Tensor(NKIObject):
    """An NKI tensor: a strided view of a buffer (``NkiTensor``). Dim 0 of an SBUF / PSUM tensor
    is the partition dim. Slicing and ``reshape`` make views and cost nothing at run time. A view
    may read its buffer's bytes as another dtype (``view`` / ``ap(dtype=)``): its offset and
    strides then count elements of that dtype."""

    __array_priority__ = 1000  # NumPy scalars on the left defer to our operators

    def __init__(self, buffer, shape, strides=None, offset=0, dtype=None):
        self._buffer = buffer
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(strides) if strides is not None else _contiguous_strides(self.shape)
        self.offset = offset
        self._dtype = dtype if dtype is not None and dtype.code != buffer.dtype.code else None
        self._pending_matmul = None  # index of the nc_matmul that produced this fresh PSUM tile

    def _fewest_index_dims(self):
        """The fewest dims an integer index leaves (NKI 0.6's indexing rule, see __getitem__):
        2 on chip, 1 in HBM, never more than the tensor has."""
        return min(self.ndim, 2 if self._buffer.on_chip else 1)

    def _derive(self, shape, strides, offset=None, dtype=None):
        return Tensor(self._buffer, shape, strides, self.offset if offset is None else offset,
                      dtype if dtype is not None else self._dtype)

    # -- properties NKI exposes
    @property
    def dtype(self):
        return self._dtype or self._buffer.dtype

    @property
    def buffer(self):
        return self._buffer.memory

    @property
    def name(self):
        return self._buffer.name

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"NkiTensor(shape={self.shape}, dtype={self.dtype}, buffer={self.buffer})"

    def numel(self):
        return math.prod(self.shape)

    def same_view(self, other):
        return (isinstance(other, Tensor) and other._buffer is self._buffer
                and other.shape == self.shape and other.strides == self.strides
                and other.offset == self.offset and other.dtype == self.dtype)

    def encode(self):
        return (self._buffer.id, static_offset(self.offset), list(self.shape), list(self.strides),
                self._dtype.code if self._dtype is not None else -1)

    def runtime_offset(self):
        """The view's RuntimeOffset, or None for a view placed when the kernel specialises."""
        return self.offset if isinstance(self.offset, RuntimeOffset) else None

    def _partition_stride(self):
        b = self._buffer
        return b.elements // b.shape[0] * b.dtype.itemsize // self.dtype.itemsize

    # -- queries
    def is_contiguous(self):
        """Row-major over the free dims (on-chip: the partition dim is not a memory dim)."""
        first = 1 if self._buffer.on_chip else 0
        expect = 1
        for n, st in reversed(list(zip(self.shape[first:], self.strides[first:]))):
            if n != 1 and st != expect:
                return False
            expect *= n
        return True

    def get_pattern(self):
        """The view's access pattern, [[stride, count], ...] per dim."""
        return [[int(st), int(n)] for st, n in zip(self.strides, self.shape)]

    def is_indirect(self):
        """Whether the view is placed at run time (a runtime offset)."""
        return self.runtime_offset() is not None

    # -- views
    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        if any(getattr(k, "_index_grid", False) for k in key) or (
                any(isinstance(k, Tensor) for k in key) and "grid_index" in HOOKS
                and getattr(current_tracer(optional=True), "legacy_uses", None) is not None):
            # Index grids (nl.arange / nl.mgrid) and tiles of runtime indices (an indirect DMA)
            # of the legacy neuronxcc.nki API: its module installs the indexer.
            return HOOKS["grid_index"](self, key)
        if any(_runtime_index(k) for k in key):
            return self._runtime_index(key)
        key = tuple(k.as_slice() if isinstance(k, DynamicSlice) else k for k in key)
        if any(k is Ellipsis for k in key):
            i = key.index(Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:i] + (slice(None),) * fill + key[i + 1:]
        if len(key) > self.ndim:
            raise error(f"too many indices ({len(key)}) for a tensor of shape {self.shape}")
        key = key + (slice(None),) * (self.ndim - len(key))
        shape, strides, offset = [], [], self.offset
        for d, (k, n, st) in enumerate(zip(key, self.shape, self.strides)):
            if isinstance(k, slice):
                for v in (k.start, k.stop, k.step):
                    if v is not None and not _is_int(v):
                        raise error(f"slice bound {v!r} of dim {d} is not an integer known at "
                                    "specialisation (runtime offsets need .ap(scalar_offset=...))")
                start, stop, step = k.indices(n)
                if step <= 0:
                    raise error("slices need a positive step")
                count = max(0, (stop - start + step - 1) // step)
                offset += start * st
                shape.append(count)
                strides.append(st * step)
            elif _is_int(k):
                k = int(k)
                if k < 0:
                    k += n
                if not 0 <= k < n:
                    raise error(f"index {k} is out of range for dim {d} of size {n}")
                offset += k * st
                if d == 0 and self._buffer.on_chip:
                    # The partition dim stays (size 1): on-chip tensors keep it at dim 0.
                    shape.append(1)
                    strides.append(st)
            else:
                raise error(f"index {k!r} is not supported: use integers, slices and nl.ds "
                            "(shapes are compile-time constants)")
        if len(shape) < self._fewest_index_dims():
            # NKI 0.6 (language guide, "Tensor Indexing"; NkiTensor.__getitem__'s docstring): an
            # on-chip tensor stays at least 2-D, so integers that leave only the partition dim
            # keep the last free dim at size 1 (t[:, i] of a (P, F) tile is (P, 1), t[0, 0, i]
            # is (1, 1)); an HBM tensor stays at least 1-D. The legacy API keeps (P, 1) too.
            shape, strides = shape + [1], strides + [self.strides[-1]]
        return self._derive(shape, strides, offset)

    def _runtime_index(self, key):
        """``t[..., i, ...]`` or ``t[..., nl.ds(i, n), ...]`` with a VirtualRegister i: the
        access moved along that dim by i's value when the instruction runs (a scalar offset of
        .ap: for an HBM tensor, a side of nisa.dma_copy; for an SBUF / PSUM tensor, along a free
        dim, an operand of any instruction)."""
        from nki import _indirect
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - (len(key) - 1)) + key[i + 1:]
        key = key + (slice(None),) * (self.ndim - len(key))
        dims = [d for d, k in enumerate(key) if _runtime_index(k)]
        if len(dims) != 1:
            raise error("at most one dim of an access is placed at run time (one scalar offset)")
        d = dims[0]
        k = key[d]
        size = k.size if isinstance(k, DynamicSlice) else None
        reg = k.start if isinstance(k, DynamicSlice) else k
        if self._buffer.on_chip and d == 0:
            raise error("a register index along the partition dim of an on-chip tensor: AWS "
                        "refuses runtime offsets there (NkiTensor.select: 'Dynamic on-chip: dim "
                        "must not be 0 (partition dim)'): an engine's access starts at a "
                        "partition fixed in the instruction; index a free dim (sb[:, i], "
                        "sb[:, nl.ds(i, n)]) or pick rows on the HBM side of nisa.dma_copy")
        kept = sum(1 for j, k in enumerate(key) if isinstance(k, (slice, DynamicSlice))
                   or (j == 0 and self._buffer.on_chip))
        if size is None and kept < self._fewest_index_dims():
            size = 1  # at least 2-D on chip, 1-D in HBM (as in __getitem__): dim d kept at 1
        if size is not None and size > self.shape[d]:
            raise error(f"nl.ds({reg!r}, {size}) on dim {d} of size {self.shape[d]}: the slice "
                        "is longer than the dim")
        # The other dims' static indexing first, dim d kept whole.
        base = self[key[:d] + (slice(None),) + key[d + 1:]]
        bd = sum(1 for j in range(d) if isinstance(key[j], (slice, DynamicSlice)))
        pairs = [(st, (size if j == bd else n)) for j, (st, n) in enumerate(zip(base.strides,
                                                                                base.shape))
                 if j != bd or size is not None]
        if not pairs:
            raise error("a register index on a 1-D tensor: use t[nl.ds(i, 1)]")
        # An index i names element i of the dim; nl.ds(i, n) stays inside it (i <= size - n).
        count = self.shape[d] if size is None else self.shape[d] - size + 1
        access = _indirect.access_pattern(base, pairs, base.offset, base.dtype, None, reg, bd,
                                          count)
        if size is not None and isinstance(access, _indirect.IndirectAccess):
            access.axis = bd  # the dim nl.ds(i, n) keeps takes part in the indirection
        return access

    def __setitem__(self, key, value):
        dst = self[key]
        if "mask_target" in HOOKS and isinstance(value, Tensor):
            dst = HOOKS["mask_target"](dst, value)  # the legacy API's masked assignment
        if isinstance(value, Tensor):
            if dst.same_view(value):
                return  # `t[...] += x` already wrote in place
            if not dst._buffer.on_chip or not value._buffer.on_chip:
                ins = HOOKS["dma_copy"](dst=dst, src=value)
            else:
                ins = HOOKS["tensor_copy"](dst=dst, src=value)
            # `t[...] = nl.load(...)`: if the value is a fresh tile only this copy reads, its
            # producer writes t directly (finalize folds the copy away, as NKI's compiler does).
            current_tracer().instructions[ins.index].fold = True
        elif isinstance(value, (int, float, bool)):
            HOOKS["memset"](dst=dst, value=value)
        elif hasattr(value, "_assign_into"):
            value._assign_into(dst)  # a front end's deferred write (nki.legacy: loop_reduce)
        else:
            raise error(f"cannot assign {type(value).__name__} to an NKI tensor")

    def _dim(self, dim, what):
        if not _is_int(dim):
            raise error(f"{what}: dim must be an integer, got {dim!r}")
        d = int(dim) + (self.ndim if int(dim) < 0 else 0)
        if not 0 <= d < self.ndim:
            raise error(f"{what}: dim {dim} is out of range for a {self.ndim}-D tensor")
        return d

    def _free_dim(self, dim, what):
        d = self._dim(dim, what)
        if d == 0 and self._buffer.on_chip:
            raise error(f"{what}: dim 0 of an on-chip tensor is the partition dim; it stays as is")
        return d

    def slice(self, dim, start, end, step=1):
        d = self._dim(dim, "slice")
        if not (0 <= start < end <= self.shape[d]) or step < 1:
            raise error(f"slice(dim={dim}, {start}, {end}, {step}): needs 0 <= start < end <= "
                        f"{self.shape[d]} and step >= 1")
        key = [slice(None)] * self.ndim
        key[d] = slice(start, end, step)
        return self[tuple(key)]

    def select(self, dim, index):
        d = self._dim(dim, "select")
        if isinstance(index, Tensor):
            # A runtime select: the other dims moved by one index along dim d, a scalar offset.
            from nki import _indirect
            pairs = [(st, n) for k, (st, n) in enumerate(zip(self.strides, self.shape)) if k != d]
            if 0 < len(pairs) < self._fewest_index_dims():
                pairs.append((self.strides[-1], 1))  # the indexing rule: on chip, at least 2-D
            if not pairs:
                raise error("select with a tensor index on a 1-D tensor: use "
                            ".ap([[1, 1], [1, 1]], scalar_offset=<index tile>, indirect_dim=0)")
            return _indirect.access_pattern(self, pairs, self.offset, self.dtype, None, index, d)
        if not 0 <= int(index) < self.shape[d]:
            raise error(f"select(dim={dim}, {index}): index out of range for size {self.shape[d]}")
        if d == 0 and self._buffer.on_chip:
            raise error("select: dim 0 of an on-chip tensor is the partition dim (index it with "
                        "t[i] to keep a 1-partition view)")
        # t[:, index, :] for dim 1, AWS's docstring says: the same shape rule as indexing.
        return self[(slice(None),) * d + (int(index),)]

    def vector_select(self, dim, vector_offset):
        from nki import _indirect
        return _indirect.vector_select(self, dim, vector_offset)

    def indirect(self, index, num_elem=None):
        if self.runtime_offset() is not None:
            raise error(".indirect on a view placed at run time: one runtime offset per access "
                        "(AWS: an indirect view cannot be re-indirected)")
        from nki import _tensor_indirection  # tensor indirection (NeuronCore-v4)
        return _tensor_indirection.indirect_view(self, index, num_elem)

    def expand_dim(self, dim):
        d = int(dim) + (self.ndim + 1 if int(dim) < 0 else 0)
        if not 0 <= d <= self.ndim:
            raise error(f"expand_dim({dim}): out of range for a {self.ndim}-D tensor")
        if d == 0 and self._buffer.on_chip:
            raise error("expand_dim: cannot insert a dim before the partition dim of an on-chip "
                        "tensor")
        return self._derive(self.shape[:d] + (1,) + self.shape[d:],
                            self.strides[:d] + (0,) + self.strides[d:])

    def squeeze_dim(self, dim):
        d = self._free_dim(dim, "squeeze_dim")
        if self.shape[d] != 1:
            raise error(f"squeeze_dim({dim}): dim has size {self.shape[d]}, not 1")
        return self._derive(self.shape[:d] + self.shape[d + 1:], self.strides[:d] + self.strides[d + 1:])

    def reshape_dim(self, dim, shape):
        d = self._dim(dim, "reshape_dim")
        shape = list(shape)
        if shape.count(-1) > 1:
            raise error("reshape_dim: at most one -1")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = self.shape[d] // max(known, 1)
        if math.prod(shape) != self.shape[d]:
            raise error(f"reshape_dim({dim}, {tuple(shape)}): product differs from size "
                        f"{self.shape[d]}")
        if d == 0 and self._buffer.on_chip and len(shape) != 1:
            raise error("reshape_dim: the partition dim of an on-chip tensor cannot be split")
        strides, st = [], self.strides[d]
        for n in reversed(shape):
            strides.append(st)
            st *= n
        return self._derive(self.shape[:d] + tuple(shape) + self.shape[d + 1:],
                            self.strides[:d] + tuple(reversed(strides)) + self.strides[d + 1:])

    def flatten_dims(self, start_dim, end_dim):
        a = self._dim(start_dim, "flatten_dims")
        b = self._dim(end_dim, "flatten_dims")
        if a > b:
            raise error(f"flatten_dims({start_dim}, {end_dim}): start after end")
        if a == 0 and self._buffer.on_chip and b > 0:
            raise error("flatten_dims: the partition dim of an on-chip tensor cannot merge")
        for i in range(a, b):
            if self.shape[i] != 1 and self.shape[i + 1] != 1 and \
                    self.strides[i] != self.strides[i + 1] * self.shape[i + 1]:
                raise error(f"flatten_dims({start_dim}, {end_dim}): dims {i} and {i + 1} are not "
                            "contiguous in memory")
        inner = [st for n, st in zip(self.shape[a:b + 1], self.strides[a:b + 1]) if n != 1]
        st = inner[-1] if inner else self.strides[b]
        return self._derive(self.shape[:a] + (math.prod(self.shape[a:b + 1]),) + self.shape[b + 1:],
                            self.strides[:a] + (st,) + self.strides[b + 1:])

    def reshape(self, *shape, **kwargs):
        if "shape" in kwargs and not shape:  # t.reshape(shape=(...)), as the legacy API spells it
            shape = (kwargs.pop("shape"),)
        if kwargs:
            raise error(f"reshape() got unexpected keyword arguments {sorted(kwargs)}")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = list(shape)
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = self.numel() // max(known, 1)
        if math.prod(shape) != self.numel():
            raise error(f"cannot reshape {self.shape} to {tuple(shape)}: {self.numel()} elements "
                        f"vs {math.prod(shape)}")
        if self._buffer.on_chip and (not shape or shape[0] != self.shape[0]):
            raise error("reshape of an on-chip tensor must keep the partition dim "
                        f"({self.shape[0]}); got {tuple(shape)}")
        first = 1 if self._buffer.on_chip else 0
        if not self.is_contiguous():
            raise error("reshape needs a view that is contiguous over its free dims; copy it "
                        "first")
        strides = list(_contiguous_strides(shape))
        if first:
            strides[0] = self.strides[0]
        return self._derive(shape, strides)

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None):
        """einops-style: split grouped source dims, reorder, merge grouped destination dims."""
        sizes = dict(fixed_sizes or {})
        if len(src_pattern) != self.ndim:
            raise error(f"rearrange: source pattern {src_pattern} has {len(src_pattern)} dims, "
                        f"the tensor {self.ndim}")
        t = self
        names = []
        d = 0
        for item in src_pattern:
            group = tuple(item) if isinstance(item, (tuple, list)) else (item,)
            if len(group) > 1:
                known = [sizes.get(g) for g in group]
                t = t.reshape_dim(d, tuple(k if k is not None else -1 for k in known))
            for g in group:
                sizes[g] = t.shape[d]
                names.append(g)
                d += 1
        flat_dst = [g for item in dst_pattern
                    for g in (tuple(item) if isinstance(item, (tuple, list)) else (item,))]
        if sorted(flat_dst) != sorted(names):
            raise error(f"rearrange: {dst_pattern} does not use the names of {src_pattern}")
        t = t.permute(tuple(names.index(g) for g in flat_dst))
        d = 0
        for item in dst_pattern:
            group = tuple(item) if isinstance(item, (tuple, list)) else (item,)
            if len(group) > 1:
                t = t.flatten_dims(d, d + len(group) - 1)
            d += 1
        return t

    def broadcast_to(self, shape):
        shape = tuple(shape)
        if len(shape) != self.ndim:
            raise error(f"broadcast_to {shape}: needs {self.ndim} dims")
        strides = []
        for n, m, st in zip(self.shape, shape, self.strides):
            if n == m:
                strides.append(st)
            elif n == 1:
                strides.append(0)
            else:
                raise error(f"cannot broadcast {self.shape} to {shape}")
        return self._derive(shape, strides)

    def broadcast(self, dim, size):
        d = self._free_dim(dim, "broadcast")
        if self.shape[d] != 1:
            raise error(f"broadcast({dim}, {size}): dim has size {self.shape[d]}, not 1")
        return self._derive(self.shape[:d] + (int(size),) + self.shape[d + 1:],
                            self.strides[:d] + (0,) + self.strides[d + 1:])

    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if sorted(dims) != list(range(self.ndim)):
            raise error(f"permute{tuple(dims)}: not a permutation of {self.ndim} dims")
        if self._buffer.on_chip and dims[0] != 0:
            raise error("permute of an on-chip tensor must keep the partition dim first")
        return self._derive([self.shape[d] for d in dims], [self.strides[d] for d in dims])

    def view(self, dtype):
        """The same bytes read as `dtype`; the last dim scales by the ratio of the sizes."""
        dtype = as_dtype(dtype)
        old, new = self.dtype.itemsize, dtype.itemsize
        if old == new:
            return self._derive(self.shape, self.strides, dtype=dtype)
        if self.strides[-1] != 1 and self.shape[-1] != 1:
            raise error(f"view({dtype}): the last dim must be contiguous")
        lead = list(self.strides[:-1])
        if any((st * old) % new for st in lead) or (self.offset * old) % new:
            raise error(f"view({dtype}): the view's strides / offset are not whole "
                        f"{dtype} elements")
        if (self.shape[-1] * old) % new:
            raise error(f"view({dtype}): last dim {self.shape[-1]} x {old} bytes is not a "
                        f"multiple of {new}")
        return Tensor(self._buffer, self.shape[:-1] + (self.shape[-1] * old // new,),
                      [st * old // new for st in lead] + [1], self.offset * old // new, dtype)

    reinterpret_cast = view

    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0,
           dtype=None):
        """An explicit access pattern [[stride, count], ...] over the view's storage (strides and
        offset in elements of `dtype`, default the tensor's). On-chip, the first pair is the
        partition dim and its stride must be the storage's free size."""
        dtype = as_dtype(dtype) if dtype is not None else self.dtype
        try:
            pairs = [(int(st), int(n)) for st, n in pattern]
        except (TypeError, ValueError):
            raise error(f".ap: pattern must be [[stride, count], ...], got {pattern!r}") from None
        if not pairs:
            raise error(".ap: empty pattern")
        base = self.offset * self.dtype.itemsize
        if base % dtype.itemsize:
            raise error(f".ap: the view's offset is not a whole number of {dtype} elements")
        off = base // dtype.itemsize + (int(offset) if offset is not None else 0)
        if self._buffer.on_chip:
            pstride = self._buffer.elements // self._buffer.shape[0] * \
                self._buffer.dtype.itemsize // dtype.itemsize
            if pairs[0][0] != pstride and pairs[0][1] != 1:
                raise error(f".ap on {self.buffer.name}: the first pair is the partition dim; its "
                            f"stride must be the storage's free size {pstride}, got "
                            f"{pairs[0][0]}")
        if scalar_offset is not None or vector_offset is not None:
            from nki import _indirect  # runtime offsets: an indirect DMA's side
            return _indirect.access_pattern(self, pairs, off, dtype, vector_offset,
                                            scalar_offset, indirect_dim)
        return Tensor(self._buffer, [n for _, n in pairs], [st for st, _ in pairs], off, dtype)

    @property
    def T(self):
        if self.ndim != 2 or self._buffer.on_chip:
            raise error(".T is a view of 2-D HBM tensors; transpose on-chip tiles with "
                        "nl.transpose / nisa.nc_transpose")
        return self.permute(1, 0)

    # -- arithmetic through nki.language (its functions, installed in HOOKS at its import)
    def _nl(self, name, *args):
        return HOOKS[name](*args)

    def __add__(self, o): return self._nl("add", self, o)
    def __radd__(self, o): return self._nl("add", o, self)
    def __sub__(self, o): return self._nl("subtract", self, o)
    def __rsub__(self, o): return self._nl("subtract", o, self)
    def __mul__(self, o): return self._nl("multiply", self, o)
    def __rmul__(self, o): return self._nl("multiply", o, self)
    def __truediv__(self, o): return self._nl("divide", self, o)
    def __rtruediv__(self, o): return self._nl("divide", o, self)
    def __pow__(self, o): return self._nl("power", self, o)
    def __neg__(self): return self._nl("negative", self)
    def __abs__(self): return self._nl("abs", self)
    def __lt__(self, o): return self._nl("less", self, o)
    def __le__(self, o): return self._nl("less_equal", self, o)
    def __gt__(self, o): return self._nl("greater", self, o)
    def __ge__(self, o): return self._nl("greater_equal", self, o)
    def __matmul__(self, o): return self._nl("matmul", self, o)

    def _inplace(self, name, other):
        if getattr(other, "_masked_off", False):
            return self  # nki.legacy: `acc += <instruction with mask=False>` writes nothing
        if (name == "add" and self.buffer is psum and isinstance(other, Tensor)
                and other._pending_matmul is not None and other.shape == self.shape):
            # `acc += nl.matmul(...)`: the matmul accumulates into acc in PSUM instead of writing
            # a fresh tile (the Tensor engine's near-memory accumulate).
            tracer = current_tracer()
            fresh = (tracer.legacy_uses is not None
                     and self._buffer.id not in tracer.touched_buffers)
            tracer.retarget_matmul(other._pending_matmul, self)
            if fresh:
                # The legacy API's `acc += nc_matmul(...)` on a PSUM tile nothing has written
                # starts the accumulation group: the first matmul overwrites, as AWS's compiler
                # set it (its samples accumulate into nl.ndarray PSUM tiles and match their
                # references on devices); NKI 0.6's accumulate=None rule.
                tracer.instructions[other._pending_matmul].accumulate = None
                file, line = caller_location()
                tracer.legacy_uses.append((
                    file, line, "psum_tile += nc_matmul(...) into a PSUM tile nothing wrote",
                    "nisa.nc_matmul(dst=psum_tile, ...) (accumulate=None: the first matmul into "
                    "the tile overwrites it, the following accumulate), or allocate it with "
                    "nl.zeros"))
            other._pending_matmul = None
            return self
        op = HOOKS[name]
        if isinstance(other, Tensor):
            HOOKS["tensor_tensor"](dst=self, data1=self, data2=other, op=op)
        else:
            HOOKS["tensor_scalar"](dst=self, data=self, op0=op, operand0=other)
        return self

    def __iadd__(self, o): return self._inplace("add", o)
    def __isub__(self, o): return self._inplace("subtract", o)
    def __imul__(self, o): return self._inplace("multiply", o)
    def __itruediv__(self, o): return self._inplace("divide", o)

    def __bool__(self):
        # A tensor is true, as in AWS's NKI, whose tracer runs the kernel's Python: kernels test
        # optional arguments and configuration fields with `if t` (AWS's library: the MoE
        # token-generation kernels' HBM arguments, moe_block's `if
        # params.expert_params.expert_index:` on an SBUF tile). A tile's data does not exist
        # while the kernel specialises, so `if tile:` can never test it: that case is said once
        # per line, since a kernel that meant its values gets the same wrong branch on AWS's
        # compiler too.
        if self._buffer.on_chip:
            file, line = caller_location()
            tracer = current_tracer(optional=True)
            kernel = f" in kernel '{tracer.name}'" if tracer is not None else ""
            warnings.warn_explicit(
                f"{file}:{line}{kernel}: `if` on an on-chip tensor is always true (as in AWS's "
                "NKI: it tests that the tensor exists, never its values, which do not exist "
                "while the kernel specialises); data-dependent control flow needs nl.where, "
                "nisa.select or a device loop on a register", UserWarning, file, line)
        return True

    def __iter__(self):
        raise error("NKI tensors cannot be iterated; index them with slices")


# ---------------------------------------------------------------------------------------------
# the tracer


_state = threading.local()


def current_tracer(optional=False):
    t = getattr(_state, "tracer", None)
    if t is None and not optional:
        raise NkiError("nki.language / nki.isa calls are only valid inside a kernel that is being "
                       "called through @nki.jit")
    return t


class NkiSpillWarning(UserWarning):
    """SBUF or PSUM is over-subscribed at some point of a kernel: as AWS's compiler does, a live
    tile is spilled to the next memory tier (SBUF -> HBM, PSUM -> SBUF) and reloaded before its
    next use. The transfers are part of the program and of its modelled time."""


# Views an instruction may carry, in the order the runtime takes them (Program.h): dst, then the
# operands a..f.
VIEW_SLOTS = ("dst", "a", "b", "c", "d", "e", "f")
# The most dims a view may have: the runtime's kMaxDims (csrc/runtime/nki/Program.h).
MAX_VIEW_DIMS = 8


def _nth(k):
    return {0: "first", 1: "second", 2: "third"}.get(k, f"{k + 1}th")


class CoreSync:
    """What one cross-core synchronisation point of one program is (nisa.core_barrier or
    nisa.sendrecv): `key` must be the same on every core at the same point."""

    def __init__(self, what, key, peer=None):
        self.what, self.key, self.peer = what, key, peer

    def check_pair(self, ins, here, prog):
        if self.peer is None:
            return
        peer = here.get(self.peer)
        if peer is None or peer.sync.peer != prog:
            raise error(f"{self.what} at line {ins.location[1]}: core {prog} sends to core "
                        f"{self.peer}, but core {self.peer}'s matching sendrecv (line "
                        f"{peer.location[1] if peer else '?'}) does not receive from core {prog}")
        src, dst = peer.views["a"], ins.dst
        if src.dtype != dst.dtype or src.shape[0] != dst.shape[0] or src.numel() != dst.numel():
            raise error(f"{self.what} at line {ins.location[1]}: core {prog}'s dst {dst.shape} "
                        f"{dst.dtype} cannot receive core {self.peer}'s src {src.shape} "
                        f"{src.dtype}: the same dtype, partitions and elements per partition "
                        "are needed")


class Instr:
    """One recorded instruction: opcode, engine, views and parameters (Program.h's Instruction)."""

    __slots__ = ("op", "engine", "program", "location", "views", "alu0", "alu1", "alu2",
                 "reverse0", "reverse1", "imm0", "imm1", "imm2", "act", "axes", "negate",
                 "accumulate", "reduce_cmd", "pattern", "text", "after", "name", "spill", "fold",
                 "sync", "skip_oob")

    def __init__(self, op, engine, program, location, views, **params):
        self.op, self.engine, self.program, self.location = op, engine, program, location
        self.views = views  # slot -> Tensor
        self.alu0 = self.alu1 = self.alu2 = 0
        self.reverse0 = self.reverse1 = self.negate = False
        self.imm0 = self.imm1 = self.imm2 = 0.0
        self.act = self.axes = self.reduce_cmd = 0
        self.accumulate = None
        self.pattern, self.text, self.after, self.name, self.spill = [], "", [], None, None
        self.fold = False
        self.sync = None  # a CoreSync: this instruction is a cross-core synchronisation point
        self.skip_oob = False  # oob_mode.skip: a runtime offset out of range moves nothing
        for k, v in params.items():
            setattr(self, k, v)

    @property
    def dst(self):
        return self.views.get("dst")

    def operands(self):
        """The views the instruction reads or writes, and the index views its runtime offsets
        read."""
        views = [v for v in self.views.values() if v is not None]
        return views + [v.offset.index for v in views if isinstance(v.offset, RuntimeOffset)]

    def encode(self):
        for k in VIEW_SLOTS:
            t = self.views.get(k)
            if t is not None and len(t.shape) > MAX_VIEW_DIMS:
                raise error(f"a view of {len(t.shape)} dims (shape {tuple(t.shape)}); the "
                            f"interpreter takes views of at most {MAX_VIEW_DIMS} dims: merge "
                            "dims (reshape / flatten_dims) or split the access", self.location)
        v = [self.views[k].encode() if self.views.get(k) is not None else None for k in VIEW_SLOTS]
        offsets = [(VIEW_SLOTS.index(k), r.index.encode(), r.stride, r.count, self.skip_oob)
                   for k, r in self.runtime_offsets()]
        return (self.op, self.engine, self.program, self.location[1], *v, self.alu0, self.alu1,
                self.alu2, bool(self.reverse0), bool(self.reverse1), float(self.imm0),
                float(self.imm1), float(self.imm2), self.act, self.axes, bool(self.negate),
                bool(self.accumulate), self.reduce_cmd, list(self.pattern), self.text,
                list(self.after), offsets)

    def runtime_offsets(self):
        """(slot, RuntimeOffset) of the operands placed at run time."""
        return [(k, v.offset) for k, v in self.views.items()
                if v is not None and isinstance(v.offset, RuntimeOffset)]


class Tracer:
    """Collects one specialisation of a kernel: buffers and instructions, in program order."""

    def __init__(self, name, target, grid):
        self.name = name
        self.target = target
        self.spec = TARGETS[target]
        self.grid = grid
        self.buffers = []
        self.instructions = []  # Instr, in program order
        self.program = 0
        self.program_coords = (0,)
        self.hbm_allocs = {}  # program -> [Buffer] in allocation order (shared_hbm aliasing)
        self.accumulators = {}  # (program, engine) -> the engine's reduce accumulator Buffer
        self.spills = []  # [(Buffer, bytes moved)] chosen by finalize()
        self.legacy_uses = None  # a list while a legacy-API kernel traces (nki.legacy.report)
        self.touched_buffers = set()  # ids of the buffers some instruction so far reads or writes
        self.registers = []  # VirtualRegisters allocated (nki._loops)
        self.open_loops = []  # device loops begun and not yet ended, innermost last

    @property
    def locations(self):
        return [ins.location for ins in self.instructions]

    def grid_size(self):
        """How many SPMD programs the launch runs."""
        return math.prod(self.grid)

    def __enter__(self):
        self._previous = getattr(_state, "tracer", None)
        _state.tracer = self
        return self

    def __exit__(self, *exc):
        _state.tracer = self._previous

    # -- allocation
    def allocate(self, shape, dtype, memory, name=""):
        dtype = as_dtype(dtype)
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if any(s <= 0 for s in shape):
            raise error(f"tensor shape {shape} must have positive sizes")
        if memory.code != 0:
            if len(shape) < 1 or shape[0] > PMAX:
                raise error(f"{memory.name} tensor {shape}: partition dimension {shape[0]} exceeds "
                            f"maximum {PMAX} (dim 0 is the partition dim; tile the data)")
            per_partition = math.prod(shape[1:]) * dtype.itemsize
            limit = (self.spec["sbuf_partition_bytes"] if memory is sbuf
                     else PSUM_BANKS * PSUM_BANK_BYTES)
            if per_partition > limit:
                raise error(f"{memory.name} tensor {shape} {dtype}: {per_partition} bytes per "
                            f"partition exceed the {limit} of a NeuronCore-v{self.spec['version']} "
                            f"{memory.name} partition")
        else:
            allocs = self.hbm_allocs.setdefault(self.program, [])
            if self.program > 0 and memory is shared_hbm:
                # SPMD programs share shared_hbm tensors: the k-th allocation of every program is
                # program 0's k-th.
                first = self.hbm_allocs.get(0, [])
                k = len(allocs)
                if k < len(first) and first[k].shape == shape and first[k].dtype == dtype:
                    allocs.append(first[k])
                    return Tensor(first[k], shape)
        buf = Buffer(self, memory, shape, dtype, name)
        if memory.code == 0:
            self.hbm_allocs.setdefault(self.program, []).append(buf)
        return Tensor(buf, shape)

    def argument(self, shape, dtype, binding, name):
        buf = Buffer(self, hbm, shape, dtype, name, binding=binding, poison=False)
        return Tensor(buf, shape)

    def accumulator(self, engine):
        """A view of `engine`'s internal reduce accumulators ([128, 1] float32, one per lane),
        which reduce_cmd carries between instructions. Not SBUF: it takes no capacity."""
        key = (self.program, engine)
        buf = self.accumulators.get(key)
        if buf is None:
            buf = Buffer(self, sbuf, (PMAX, 1), float32, f"<{ENGINE_NAMES[engine]} accumulator>",
                         poison=False)
            buf.internal = True
            self.accumulators[key] = buf
        return Tensor(buf, (PMAX, 1))

    # -- instructions
    def emit(self, op, engine, dst=None, a=None, b=None, c=None, d=None, e=None, f=None, *,
             name=None, **params):
        ins = Instr(op, engine, self.program, caller_location(),
                    {"dst": dst, "a": a, "b": b, "c": c, "d": d, "e": e, "f": f}, **params)
        if any(isinstance(v, Tensor) and v.dtype.packed and op not in PACKED_OPS
               for v in ins.operands()):
            raise error("MX x4 tensors (float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4) are "
                        "read only by nc_matmul_mx and copies of the same dtype, and written by "
                        "quantize_mx, copies and a zero memset")
        ins.name = name
        if op == OP_COLLECTIVE and ins.runtime_offsets():
            raise error("nki.collectives: a tile placed at run time (a runtime offset) is not "
                        "modelled for in-kernel collectives; pass a tile at a static offset "
                        "(copy it there with nisa.tensor_copy)")
        before = after = ()
        if any(getattr(v._buffer, "indirection", None) is not None for v in ins.operands()):
            from nki import _tensor_indirection
            before, after = _tensor_indirection.expand(ins)
        for one in (*before, ins, *after):
            self.instructions.append(one)
            for v in one.operands():
                self.touched_buffers.add(v._buffer.id)
        return len(self.instructions) - 1 - len(after)

    def retarget_matmul(self, index, acc):
        ins = self.instructions[index]
        old = ins.dst
        if acc.shape != old.shape:
            raise error(f"cannot accumulate a matmul of shape {old.shape} into {acc.shape}")
        check_psum_dst(acc, ins.views["a"].dtype, ins.views["b"].dtype)
        ins.views["dst"] = acc
        ins.accumulate = True

    # -- finishing
    def finalize(self):
        """Resolves PSUM accumulation groups, checks on-chip capacity over the buffers' lifetimes
        (spilling where AWS's compiler spills) and returns (buffers, instructions) in the form the
        runtime takes."""
        if self.open_loops:
            raise error("this device loop's body was left before it ended (break, return or an "
                        "exception out of a `while reg:` / nl.dynamic_range body): device loops "
                        "run their body to its end", self.open_loops[-1]["location"])
        self._fold_assignments()
        if "check_placements" in HOOKS:  # tiles the legacy API placed (nki.legacy.allocation)
            HOOKS["check_placements"](self)
        self._resolve_accumulation()
        self._place_on_chip()
        self._interleave_programs()
        buffers = [(b.memory.code, b.dtype.code, b.elements, b.binding, b.poison)
                   for b in self.buffers]
        return buffers, [ins.encode() for ins in self.instructions]

    def _interleave_programs(self):
        """SPMD programs run at the same time on their cores: the interpreter executes their
        instructions interleaved (the k-th of each program in turn) rather than one program
        after another, so that programs touching the same shared_hbm tensor see what concurrent
        cores would (e.g. every program zeroing an output before any writes its share).

        Cross-core synchronisation points (nisa.core_barrier, nisa.sendrecv) split every
        program into phases: all programs' instructions of one phase run before the
        synchronisation and before any of the next phase (what the semaphores guarantee on
        the hardware). Every program must reach the same synchronisation points in the same
        order; one that a program never reaches would hang the hardware, and is an error here."""
        if len(self.grid) == 1 and self.grid[0] == 1:
            return
        per = {}
        for i, ins in enumerate(self.instructions):
            per.setdefault(ins.program, []).append(i)
        programs = sorted(per)
        self._mark_joint_loops(per)
        phases = {}  # program -> [(instruction units, the CoreSync ending the phase or None)]
        for prog in programs:
            cur, out = [], []
            depth, loop_unit = 0, None
            for i in per[prog]:
                ins = self.instructions[i]
                # A device loop without a synchronisation is one unit: its body runs as a
                # whole, as many times as the program's registers say, so it cannot interleave
                # with other programs' instructions. One that holds a synchronisation is a joint
                # loop (_mark_joint_loops): its begin and end are synchronisation points.
                if ins.op == OP_LOOP_BEGIN and ins.sync is None:
                    depth += 1
                    if depth == 1:
                        loop_unit = []
                if depth:
                    loop_unit.append(i)
                    if ins.op == OP_LOOP_END and ins.sync is None:
                        depth -= 1
                        if depth == 0:
                            cur.append(loop_unit)
                    continue
                if ins.sync is None:
                    cur.append(i)
                else:
                    out.append((cur, i))
                    cur = []
            out.append((cur, None))
            phases[prog] = out
        self._match_syncs(programs, phases)
        order = []
        for k in range(len(phases[programs[0]])):
            queues = [phases[prog][k][0] for prog in programs]
            n = 0
            while any(n < len(q) for q in queues):
                for q in queues:
                    if n < len(q):
                        order.extend(q[n] if isinstance(q[n], list) else (q[n],))
                n += 1
            ends = [phases[prog][k][1] for prog in programs]
            if ends[0] is not None:
                order.extend(self._sync_slot([self.instructions[i] for i in ends], ends))
        remap = {old: new for new, old in enumerate(order) if isinstance(old, int)}
        out = [self.instructions[i] if isinstance(i, int) else i for i in order]
        for ins in out:
            ins.after = [remap[j] for j in ins.after]
        self.instructions = out

    def _match_syncs(self, programs, phases):
        """Every program must reach the same synchronisation points in the same order."""
        counts = {prog: len(phases[prog]) - 1 for prog in programs}
        for k in range(max(counts.values())):
            here = {prog: self.instructions[phases[prog][k][1]] for prog in programs
                    if k < counts[prog]}
            first = here[min(here)]
            where = f"line {first.location[1]}"
            for prog in programs:
                if prog not in here:
                    raise error(f"{first.sync.what} at {where} (the {_nth(k)} cross-core "
                                f"synchronisation of core {min(here)}) is never reached by core "
                                f"{prog}: on the hardware core {min(here)} would wait forever. "
                                "Every logical core must make the same nisa.core_barrier / "
                                "nisa.sendrecv calls in the same order")
                other = here[prog]
                if other.sync.key != first.sync.key:
                    raise error(f"the {_nth(k)} cross-core synchronisation differs between "
                                f"cores: core {min(here)} reaches {first.sync.what} at {where}, "
                                f"core {prog} {other.sync.what} at line {other.location[1]}; "
                                "on the hardware they would not pair up (a hang). Every logical "
                                "core must make the same calls in the same order")
            for prog, ins in here.items():
                ins.sync.check_pair(ins, here, prog)

    def _mark_joint_loops(self, per):
        """A device loop that holds a cross-core synchronisation in a multi-program launch runs
        as one joint loop of the cores (their bodies interleaved phase by phase between the
        synchronisations, as the hardware's semaphores order them): its begin and end become
        synchronisation points, which every core must reach in the same order, and the cores
        must continue or stop together when it runs (the interpreter checks it)."""
        for prog, indices in per.items():
            stack, holds = [], set()
            for i in indices:
                ins = self.instructions[i]
                if ins.op == OP_LOOP_BEGIN:
                    stack.append(i)
                elif ins.op == OP_LOOP_END:
                    b = stack.pop()
                    if b in holds:
                        begin = self.instructions[b]
                        begin.sync = CoreSync(
                            f"the device loop of line {begin.location[1]}",
                            ("loop", begin.axes, float(begin.imm2)))
                        ins.sync = CoreSync(f"the end of the device loop of line "
                                            f"{begin.location[1]}", ("loop end",))
                elif ins.sync is not None:
                    holds.update(stack)

    def _sync_slot(self, ends, indices):
        """The instructions of one synchronisation point, every program's: a barrier's, or a
        sendrecv's barrier, its transfers (each core's dst receives its peer's src), and the
        barrier that completes the pipe; or the one joint begin / end of the cores' device loop."""
        if ends[0].op == OP_BARRIER:
            return list(indices)
        if ends[0].op in LOOP_MARKERS:
            if len(ends) != 2:
                raise error(f"{ends[0].sync.what} holds a cross-core synchronisation in a "
                            f"{len(ends)}-program launch: joint device loops run on the two "
                            "cores of an LNC=2 launch", ends[0].location)
            first, second = ends
            views = {k: None for k in VIEW_SLOTS}
            if first.op == OP_LOOP_END:
                return [Instr(OP_LOOP_END, GPSIMD, first.program, first.location, views)]
            if first.axes & 1:  # while: each core's condition register
                views.update(a=first.views["a"], c=second.views["a"])
            else:  # counted: each core's bounds (registers) and induction register
                views.update(dst=first.dst, a=first.views["a"], b=first.views["b"],
                             c=second.views["a"], d=second.views["b"], e=second.dst)
            return [Instr(OP_LOOP_BEGIN, GPSIMD, first.program, first.location, views,
                          axes=first.axes | 2, imm2=first.imm2)]

        def barrier(ins):
            b = Instr(OP_BARRIER, GPSIMD, ins.program, ins.location,
                      {k: None for k in VIEW_SLOTS})
            return b

        sources = {ins.program: ins.views["a"] for ins in ends}
        for ins in ends:
            ins.views["a"] = sources[ins.sync.peer]
        return [barrier(ins) for ins in ends] + list(indices) + [barrier(ins) for ins in ends]

    def _fold_assignments(self):
        """Drops the copy of `t[...] = value` where value is a fresh on-chip tile that its
        producer wrote whole and only this copy reads, of the same dtype and shape, into a memory
        the producer's engine can write: the producer then writes t itself."""
        uses = {}
        for i, ins in enumerate(self.instructions):
            for v in ins.operands():
                uses.setdefault(v._buffer.id, []).append(i)
        drop = set()
        for i, ins in enumerate(self.instructions):
            if not ins.fold:
                continue
            src, dst = ins.views["a"], ins.dst
            buf = src._buffer
            used = sorted(set(uses.get(buf.id, ())))
            if (not buf.on_chip or not dst._buffer.on_chip or buf.internal or buf.binding >= 0
                    or len(used) != 2
                    or used[1] != i or src.shape != buf.shape or src.offset != 0
                    or dst.runtime_offset() is not None
                    or src.strides != _contiguous_strides(buf.shape) or src.dtype != dst.dtype
                    or src._dtype is not None or dst.shape != src.shape):
                continue
            prod = self.instructions[used[0]]
            if prod.dst is None or prod.dst._buffer is not buf or not prod.dst.same_view(src):
                continue
            if any(self.instructions[j].op in LOOP_MARKERS for j in range(used[0] + 1, i)):
                # A device loop's boundary in between: the producer runs a different number of
                # times than the copy.
                continue
            if any(used[0] < j < i for j in uses.get(dst._buffer.id, ())):
                # The producer's write to t would move back to the producer's place: no
                # instruction in between may read or write t's buffer (a memset of `nl.zeros`
                # tiles that a block tensor allocates on first use, between a load and its
                # assignment, would otherwise land after the load's data and zero it).
                continue
            if any(v._buffer is buf for k, v in prod.views.items() if k != "dst" and v is not None):
                continue
            if prod.engine == DMA and dst.buffer is psum:
                continue
            if prod.engine == GPSIMD and dst.buffer is psum:
                continue
            if prod.op in (OP_MATMUL, OP_MATMUL_MX, OP_TRANSPOSE) and dst.buffer is not psum:
                continue
            if prod.op in PARTIAL_WRITE_OPS:
                continue
            prod.views["dst"] = dst
            drop.add(i)
        if drop:
            remap, out = {}, []
            for i, ins in enumerate(self.instructions):
                if i in drop:
                    continue
                remap[i] = len(out)
                out.append(ins)
            for ins in out:
                ins.after = [remap[j] for j in ins.after if j in remap]
            self.instructions = out

    def _resolve_accumulation(self):
        # accumulate=None: the first matmul into a PSUM region overwrites it and the following
        # ones accumulate, until something other than a matmul reads or writes that buffer.
        open_groups = {}
        for ins in self.instructions:
            if ins.op in (OP_MATMUL, OP_MATMUL_MX):
                dst = ins.dst
                key = (dst.offset, dst.shape, dst.strides)
                groups = open_groups.setdefault(dst._buffer.id, set())
                if ins.accumulate is None:
                    ins.accumulate = key in groups
                groups.add(key)
                continue
            for v in ins.operands():
                if v._buffer.memory is psum:
                    open_groups.pop(v._buffer.id, None)

    def _place_on_chip(self):
        """Sweeps the program with the set of live on-chip tiles (a tile lives from its first to
        its last use, as the NKI allocator sees it). Where SBUF bytes per partition or PSUM banks
        run out, the live tile that the current instruction does not use and whose next use is
        farthest away is spilled: stored to the next tier after its previous use and reloaded
        before its next one (as AWS's compiler does). Only when the current instruction's own
        tiles do not fit is it an error."""
        uses = {}
        for i, ins in enumerate(self.instructions):
            for v in ins.operands():
                b = v._buffer
                if b.on_chip and not getattr(b, "internal", False):
                    lst = uses.setdefault(b.id, [])
                    if not lst or lst[-1] != i:
                        lst.append(i)
        self._widen_over_loops(uses)
        used_at = {}
        for bid, lst in uses.items():
            for i in lst:
                used_at.setdefault(i, []).append(bid)
        last = {bid: lst[-1] for bid, lst in uses.items()}
        cost = {sbuf: lambda b: b.partition_bytes(),
                psum: lambda b: -(-b.partition_bytes() // PSUM_BANK_BYTES)}
        limit = {sbuf: self.spec["sbuf_partition_bytes"], psum: PSUM_BANKS}
        resident = {sbuf: set(), psum: set()}
        total = {sbuf: 0, psum: 0}
        prev_use = {}
        spills = []  # (buffer, store after instruction, reload before instruction)
        pending = {}  # bid -> store index, while spilled
        for i in range(len(self.instructions)):
            here = used_at.get(i, [])
            for bid in here:
                b = self.buffers[bid]
                m = b.memory
                if bid not in resident[m]:
                    resident[m].add(bid)
                    total[m] += cost[m](b)
                    if bid in pending:
                        spills.append((b, pending.pop(bid), i))
            for m in (sbuf, psum):
                while total[m] > limit[m]:
                    # A tile the kernel placed itself (legacy direct allocation) stays put.
                    victims = [bid for bid in resident[m] if bid not in here and last[bid] > i
                               and getattr(self.buffers[bid], "placement", None) is None]
                    if not victims:
                        raise self._capacity_error(self.instructions[i].location, resident[m], m,
                                                   total[m], limit[m])
                    # Belady's choice, as a register allocator spills: the tile whose next use is
                    # farthest away (the fewest reloads), the larger on a tie.
                    v = max(victims, key=lambda bid: (uses[bid][bisect.bisect_right(uses[bid], i)],
                                                      cost[m](self.buffers[bid]), bid))
                    resident[m].discard(v)
                    total[m] -= cost[m](self.buffers[v])
                    pending[v] = prev_use[v]
            for bid in here:
                prev_use[bid] = i
                if last[bid] == i:
                    m = self.buffers[bid].memory
                    resident[m].discard(bid)
                    total[m] -= cost[m](self.buffers[bid])
        if spills:
            self._insert_spills(spills)

    def _widen_over_loops(self, uses):
        """A tile used inside a device loop's body and outside it lives across the whole loop
        (the body runs again after its last use in program order): its uses gain the loop's
        begin and end, so that it is never spilled across the loop's boundary."""
        loops, stack = [], []
        for i, ins in enumerate(self.instructions):
            if ins.op == OP_LOOP_BEGIN:
                stack.append(i)
            elif ins.op == OP_LOOP_END:
                loops.append((stack.pop(), i))
        if not loops:
            return
        loops.sort(key=lambda be: be[1] - be[0])  # inner loops first
        for bid, lst in uses.items():
            for b, e in loops:
                if lst[0] <= e and lst[-1] >= b and not (lst[0] > b and lst[-1] < e):
                    lst[:] = sorted(set(lst) | {b, e})

    def _insert_spills(self, spills):

        after, before = {}, {}
        notes = []
        for buf, store_at, reload_at in spills:
            to_hbm = buf.memory is sbuf
            home = Buffer(self, hbm if to_hbm else sbuf, buf.shape, buf.dtype,
                          f"<spill of {buf.name or 'tile'}>", poison=False)
            home.internal = True
            whole = Tensor(buf, buf.shape)
            saved = Tensor(home, buf.shape)
            op, eng = (OP_DMA, DMA) if to_hbm else (OP_COPY, VECTOR)
            store = Instr(op, eng, self.instructions[store_at].program, buf.location,
                          {"dst": saved, "a": whole}, spill="save")
            reload = Instr(op, eng, self.instructions[reload_at].program, buf.location,
                           {"dst": whole, "a": saved}, spill="reload")
            after.setdefault(store_at, []).append(store)
            before.setdefault(reload_at, []).append(reload)
            moved = 2 * buf.partition_bytes() * buf.shape[0]
            self.spills.append((buf, moved))
            if len(notes) < 3:
                notes.append(
                    f"{buf.memory.name} tile {buf.name + ' ' if buf.name else ''}{buf.shape} "
                    f"{buf.dtype} from line {buf.location[1]} to "
                    f"{'HBM' if to_hbm else 'SBUF'} after line "
                    f"{self.instructions[store_at].location[1]}, back before line "
                    f"{self.instructions[reload_at].location[1]}")
        # One warning per specialisation, at the first spilled tile's line; kernel.last_run.spills
        # lists every spill.
        first = spills[0][0]
        total = sum(m for _, m in self.spills)
        more = f" (and {len(spills) - len(notes)} more)" if len(spills) > len(notes) else ""
        warnings.warn_explicit(NkiSpillWarning(
            f"{first.location[0]}:{first.location[1]} in kernel '{self.name}': on-chip memory is "
            f"over-subscribed on a NeuronCore-v{self.spec['version']}, so {len(spills)} spill(s) "
            f"move {total} bytes: {'; '.join(notes)}{more}; smaller or shorter-lived tiles "
            "avoid it"), NkiSpillWarning, first.location[0], first.location[1])
        out = []
        remap = {}
        for i, ins in enumerate(self.instructions):
            out.extend(before.get(i, ()))
            remap[i] = len(out)
            out.append(ins)
            out.extend(after.get(i, ()))
        for ins in out:
            ins.after = [remap[j] for j in ins.after]
        self.instructions = out

    def _capacity_error(self, location, live, memory, used, limit):
        others = sorted((self.buffers[b] for b in live), key=lambda b: -b.partition_bytes())[:4]
        listing = "; ".join(f"{b.shape} {b.dtype} from line {b.location[1]}" for b in others)
        unit = ("bytes per partition of SBUF" if memory is sbuf
                else "PSUM banks (2 KiB per partition each)")
        return error(f"{used} {unit} exceed the {limit} of a NeuronCore-v{self.spec['version']} "
                     f"for the tiles this instruction uses together ({listing}); nothing can be "
                     "spilled there: use smaller tiles", location)


def check_psum_dst(dst, *input_dtypes):
    tracer = current_tracer()
    if dst.buffer is not psum:
        raise error(f"nc_matmul writes PSUM; dst is in {dst.buffer.name}")
    if tracer.spec["version"] < 4 and dst.dtype.code != float32.code:
        raise error(f"nc_matmul accumulates in float32 in PSUM on NeuronCore-v"
                    f"{tracer.spec['version']}; dst is {dst.dtype} (bfloat16 PSUM needs trn3)")
    pb = math.prod(dst.shape[1:]) * dst.dtype.itemsize
    if tracer.spec["version"] < 4 and pb > PSUM_BANK_BYTES:
        raise error(f"nc_matmul dst {dst.shape} {dst.dtype} spans {pb} bytes per partition; one "
                    f"PSUM bank holds {PSUM_BANK_BYTES} ({PSUM_BANK_BYTES // 4} float32)")
