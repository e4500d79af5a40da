"""The tracing core of the ``nki`` package: dtypes, buffers, tensors (views of buffers), the
tracer that records ISA instructions with their source lines, and the hardware rules checked while
a kernel specialises.

A kernel is specialised once per (shapes, dtypes, constants): its Python body runs with symbolic
tensors, every ``nl`` / ``nisa`` call appends instructions to the tracer, and the resulting flat
instruction list goes to the runtime's interpreter (``csrc/runtime/nki``). Nothing here touches
data.
"""

from __future__ import annotations

import math
import os
import sys
import threading

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class NkiError(ValueError):
    """A kernel broke a rule of the NKI language or of the NeuronCore it specialises for. The
    message starts with the kernel's ``file:line``."""


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

_BY_NAME = {
    d.name: d
    for d in (float32, tfloat32, bfloat16, float16, float8_e4m3, float8_e4m3fn, float8_e5m2,
              int32, uint32, int16, uint16, int8, uint8, bool_)
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
 OP_SELECT, OP_PRINT) = range(12)

# Per NeuronCore version (shared/research/trainium_nki.md §1.2): SBUF bytes per partition, the
# moving free size limit of one matmul, the chip section of neuron_cores.ini.
TARGETS = {
    "trn1": dict(version=2, sbuf_partition_bytes=192 * 1024, moving_fmax=512, chip="Trainium1"),
    "trn2": dict(version=3, sbuf_partition_bytes=224 * 1024, moving_fmax=512, chip="Trainium2"),
    "trn3": dict(version=4, sbuf_partition_bytes=256 * 1024, moving_fmax=4096, chip="Trainium3"),
}
PMAX = 128
STATIONARY_FMAX = 128
PSUM_BANK_BYTES = 2048
PSUM_BANKS = 8


# ---------------------------------------------------------------------------------------------
# source locations


def caller_location():
    """(file, line) of the innermost frame outside this package: the kernel's own line."""
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _PACKAGE_DIR:
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
        self.binding = binding
        self.poison = poison
        self.location = caller_location()
        self.elements = math.prod(self.shape)
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


class Tensor:
    """An NKI tensor: a strided view of a buffer (``NkiTensor``). Dim 0 of an SBUF / PSUM tensor
    is the partition dim. Slicing and ``reshape`` make views and cost nothing at run time."""

    __array_priority__ = 1000  # NumPy scalars on the left defer to our operators

    def __init__(self, buffer, shape, strides=None, offset=0):
        self._buffer = buffer
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(strides) if strides is not None else _contiguous_strides(self.shape)
        self.offset = offset
        self._pending_matmul = None  # index of the nc_matmul that produced this fresh PSUM tile

    # -- properties NKI exposes
    @property
    def dtype(self):
        return self._buffer.dtype

    @property
    def buffer(self):
        return self._buffer.memory

    @property
    def name(self):
        return self._buffer.name

    @property
    def ndim(self):
        return len(self.shape)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"NkiTensor(shape={self.shape}, dtype={self.dtype}, buffer={self.buffer})"

    def numel(self):
        return math.prod(self.shape)

    def same_view(self, other):
        return (isinstance(other, Tensor) and other._buffer is self._buffer
                and other.shape == self.shape and other.strides == self.strides
                and other.offset == self.offset)

    def encode(self):
        return (self._buffer.id, self.offset, list(self.shape), list(self.strides))

    # -- views
    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
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
                start, stop, step = k.indices(n)
                if step <= 0:
                    raise error("slices need a positive step")
                count = max(0, (stop - start + step - 1) // step)
                offset += start * st
                shape.append(count)
                strides.append(st * step)
            elif isinstance(k, (int,)) or hasattr(k, "__index__"):
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
                raise error(f"index {k!r} is not supported: use integers and slices of integers "
                            "(shapes are compile-time constants)")
        return Tensor(self._buffer, shape, strides, offset)

    def __setitem__(self, key, value):
        dst = self[key]
        if isinstance(value, Tensor):
            if dst.same_view(value):
                return  # `t[...] += x` already wrote in place
            from nki import isa

            if not dst._buffer.on_chip or not value._buffer.on_chip:
                isa.dma_copy(dst=dst, src=value)
            else:
                isa.tensor_copy(dst=dst, src=value)
        elif isinstance(value, (int, float, bool)):
            from nki import isa

            isa.memset(dst=dst, value=value)
        else:
            raise error(f"cannot assign {type(value).__name__} to an NKI tensor")

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = list(shape)
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = self.numel() // max(known, 1)
        if math.prod(shape) != self.numel():
            raise error(f"cannot reshape {self.shape} to {tuple(shape)}")
        if self.strides != _contiguous_strides(self.shape):
            raise error("reshape needs a contiguous tensor; copy it first")
        if self._buffer.on_chip and shape[0] != self.shape[0]:
            raise error("reshape of an on-chip tensor must keep the partition dim "
                        f"({self.shape[0]}); got {tuple(shape)}")
        return Tensor(self._buffer, shape, None, self.offset)

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
        return Tensor(self._buffer, shape, strides, self.offset)

    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if self._buffer.on_chip and dims[0] != 0:
            raise error("permute of an on-chip tensor must keep the partition dim first")
        return Tensor(self._buffer, [self.shape[d] for d in dims],
                      [self.strides[d] for d in dims], self.offset)

    @property
    def T(self):
        if self.ndim != 2 or self._buffer.on_chip:
            raise error(".T is a view of 2-D HBM tensors; transpose on-chip tiles with "
                        "nl.transpose / nisa.nc_transpose")
        return self.permute(1, 0)

    # -- arithmetic through nki.language
    def _nl(self, name, *args):
        from nki import language as nl

        return getattr(nl, name)(*args)

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
        from nki import isa, language as nl

        if (name == "add" and self.buffer is psum and isinstance(other, Tensor)
                and other._pending_matmul is not None and other.shape == self.shape):
            # `acc += nl.matmul(...)`: the matmul accumulates into acc in PSUM instead of writing
            # a fresh tile (the Tensor engine's near-memory accumulate).
            tracer = current_tracer()
            tracer.retarget_matmul(other._pending_matmul, self)
            other._pending_matmul = None
            return self
        op = getattr(nl, name)
        if isinstance(other, Tensor):
            isa.tensor_tensor(dst=self, data1=self, data2=other, op=op)
        else:
            isa.tensor_scalar(dst=self, data=self, op0=op, operand0=other)
        return self

    def __iadd__(self, o): return self._inplace("add", o)
    def __isub__(self, o): return self._inplace("subtract", o)
    def __imul__(self, o): return self._inplace("multiply", o)
    def __itruediv__(self, o): return self._inplace("divide", o)

    def __bool__(self):
        raise error("an NKI tensor has no truth value at specialisation time: data-dependent "
                    "control flow needs nl.where or device-side loops")

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


class Tracer:
    """Collects one specialisation of a kernel: buffers and instructions, in program order."""

    def __init__(self, name, target, grid):
        self.name = name
        self.target = target
        self.spec = TARGETS[target]
        self.grid = grid
        self.buffers = []
        self.instructions = []  # lists, see emit()
        self.locations = []  # per instruction: (file, line)
        self.program = 0
        self.program_coords = (0,)
        self.hbm_allocs = {}  # program -> [Buffer] in allocation order (shared_hbm aliasing)

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

    # -- instructions
    def emit(self, op, engine, dst, a=None, b=None, c=None, d=None, alu0=0, alu1=0,
             reverse0=False, reverse1=False, imm0=0.0, imm1=0.0, act=0, axes=0, negate=False,
             accumulate=None, pattern=(), text=""):
        location = caller_location()
        self.instructions.append([op, engine, self.program, location[1], dst, a, b, c, d, alu0,
                                  alu1, reverse0, reverse1, float(imm0), float(imm1), act, axes,
                                  negate, accumulate, list(pattern), text])
        self.locations.append(location)
        return len(self.instructions) - 1

    def retarget_matmul(self, index, acc):
        ins = self.instructions[index]
        old = ins[4]
        if acc.shape != old.shape:
            raise error(f"cannot accumulate a matmul of shape {old.shape} into {acc.shape}")
        check_psum_dst(acc, self.instructions[index][5].dtype, self.instructions[index][6].dtype)
        ins[4] = acc
        ins[18] = True

    # -- finishing
    def finalize(self):
        """Resolves PSUM accumulation groups, checks on-chip capacity over the buffers' lifetimes
        and returns (buffers, instructions) in the form the runtime takes."""
        self._resolve_accumulation()
        self._check_capacity()
        buffers = [(b.memory.code, b.dtype.code, b.elements, b.binding, b.poison)
                   for b in self.buffers]
        out = []
        for ins in self.instructions:
            enc = list(ins)
            for k in range(4, 9):
                enc[k] = enc[k].encode() if enc[k] is not None else None
            enc[18] = bool(enc[18])
            out.append(tuple(enc))
        return buffers, out

    def _resolve_accumulation(self):
        # accumulate=None: the first matmul into a PSUM region overwrites it and the following
        # ones accumulate, until something other than a matmul reads or writes that buffer.
        open_groups = {}
        for ins in self.instructions:
            if ins[0] == OP_MATMUL:
                dst = ins[4]
                key = (dst.offset, dst.shape, dst.strides)
                groups = open_groups.setdefault(dst._buffer.id, set())
                if ins[18] is None:
                    ins[18] = key in groups
                groups.add(key)
                continue
            for v in ins[4:9]:
                if v is not None and v._buffer.memory is psum:
                    open_groups.pop(v._buffer.id, None)

    def _check_capacity(self):
        first, last = {}, {}
        for i, ins in enumerate(self.instructions):
            for v in ins[4:9]:
                if v is not None and v._buffer.on_chip:
                    first.setdefault(v._buffer.id, i)
                    last[v._buffer.id] = i
        starts = {}
        for bid, i in first.items():
            starts.setdefault(i, []).append(bid)
        ends = {}
        for bid, i in last.items():
            ends.setdefault(i, []).append(bid)
        live = set()
        sbuf_bytes = 0
        psum_banks = 0
        sbuf_limit = self.spec["sbuf_partition_bytes"]
        for i in range(len(self.instructions)):
            for bid in starts.get(i, ()):
                b = self.buffers[bid]
                live.add(bid)
                if b.memory is sbuf:
                    sbuf_bytes += b.partition_bytes()
                    if sbuf_bytes > sbuf_limit:
                        raise self._capacity_error(b, live, sbuf, f"{sbuf_bytes} bytes per "
                                                   f"partition of SBUF exceed the {sbuf_limit}")
                else:
                    psum_banks += -(-b.partition_bytes() // PSUM_BANK_BYTES)
                    if psum_banks > PSUM_BANKS:
                        raise self._capacity_error(b, live, psum, f"{psum_banks} PSUM banks "
                                                   f"(2 KiB per partition each) exceed the "
                                                   f"{PSUM_BANKS}")
            for bid in ends.get(i, ()):
                b = self.buffers[bid]
                live.discard(bid)
                if b.memory is sbuf:
                    sbuf_bytes -= b.partition_bytes()
                else:
                    psum_banks -= -(-b.partition_bytes() // PSUM_BANK_BYTES)

    def _capacity_error(self, buf, live, memory, what):
        others = sorted((self.buffers[b] for b in live if self.buffers[b].memory is memory),
                        key=lambda b: -b.partition_bytes())[:4]
        listing = "; ".join(f"{b.shape} {b.dtype} from line {b.location[1]}" for b in others)
        return error(f"{what} of a NeuronCore-v{self.spec['version']} while this tile is live "
                     f"(largest live tiles: {listing}); use smaller tiles or let tiles die "
                     "earlier", buf.location)


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
