"""Registers and device-side loops (NKI 0.6's ``nisa.register_*``, ``nisa.VirtualRegister``,
``nl.fori_loop`` / ``nl.dynamic_range`` with register bounds, ``nl.while_loop`` and the parser
frontend's ``while reg:``).

A register is a 32-bit integer that lives on the device while the kernel runs (AWS: 64 of them
per engine sequencer; the compiler allocates the physical ones): here a [1, 1] int32 buffer of
the kernel's own, outside SBUF's capacity, that register instructions write and loops read. Its
value is not known while the kernel specialises, so Python cannot branch on it, convert it or
compute with it.

A device loop is traced once: a loop-begin instruction, the body, a loop-end instruction. The
interpreter runs the body as many times as the registers say when the kernel RUNS (a counted
loop reads its bounds once, on entry; a while loop tests its condition register before every
iteration), so one specialisation runs with any trip count. The induction value of a counted
loop is a register the body can use as a runtime offset (``t.ap(..., scalar_offset=i)``).
"""

from __future__ import annotations

import linecache
import sys

from nki import _core
from nki._core import GPSIMD, DMA, OP_COPY, OP_DMA, OP_MEMSET, Tensor, error

_INT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32")


def _check_int32(value, what):
    if not -(1 << 31) <= value < (1 << 32):
        raise error(f"{what} {value} does not fit a 32-bit register")


class VirtualRegister(_core.NKIObject):
    """A 32-bit register (``nisa.register_alloc``): its value exists only while the kernel
    runs. ``state``: an optional initial value (an int, or a one-element integer tensor)."""

    _is_register = True  # for nki._core's indexing (which does not import this module)

    def __init__(self, state=None, frozen=False):
        tracer = _core.current_tracer()
        buf = _core.Buffer(tracer, _core.sbuf, (1, 1), _core.int32,
                           f"<register {len(tracer.registers)}>")
        # Not a tile: registers live in the engine sequencers, outside SBUF's capacity.
        buf.internal = True
        object.__setattr__(self, "_buffer", buf)
        object.__setattr__(self, "frozen", bool(frozen))
        # Whether an instruction traced so far sets it: reading one that nothing set would read
        # whatever the sequencer's register held.
        object.__setattr__(self, "_set", bool(frozen))
        tracer.registers.append(self)
        if state is None:
            return
        if _core._is_int(state) or is_register(state):
            register_move(self, state)
        else:
            register_load(self, state)

    def tile(self):
        """The register as a [1, 1] int32 view (what the instructions read and write)."""
        return Tensor(self._buffer, (1, 1))

    def read(self, what):
        """The view an instruction reads, once something has set the register."""
        if not self._set:
            raise error(f"{what} reads {self!r}, which nothing has set yet (nisa.register_move "
                        "or nisa.register_load, or register_alloc(x)): its value would be "
                        "whatever the sequencer's register held")
        return self.tile()

    def written(self):
        """The view an instruction writes."""
        object.__setattr__(self, "_set", True)
        return self.tile()

    def __repr__(self):
        return f"<VirtualRegister {self._buffer.name[1:-1]}>"

    def __eq__(self, other):
        return self is other

    __hash__ = object.__hash__

    def __bool__(self):
        # `while reg:` (the parser frontend's form): the first test opens a device loop on this
        # register, the test Python makes again at the end of the body closes it.
        where = _kernel_frame()
        text = linecache.getline(where.f_code.co_filename, where.f_lineno).strip()
        if not (text.startswith("while ") or text.startswith("while(")):
            raise error("a register's value exists only when the kernel runs: Python cannot "
                        "branch on it while the kernel specialises (use `while reg:`, "
                        "nl.while_loop or nl.fori_loop for device-side control flow)")
        tracer = _core.current_tracer()
        self.read("`while` on a register")
        key = (id(where), where.f_lineno, id(self))
        for depth, loop in enumerate(reversed(tracer.open_loops)):
            if loop.get("key") == key:
                if depth:
                    raise error("a device loop inside this `while` loop was left before its "
                                "body ended (break / return): device loops run their body to "
                                "its end", tracer.open_loops[-1]["location"])
                end_loop(tracer)
                return False
        begin_loop(tracer, "while", condition=self, key=key)
        return True

    def _no_value(self, *_):
        raise TypeError(f"{self!r}: a register's value exists only when the kernel runs; it "
                        "cannot be converted or computed with while the kernel specialises "
                        "(use it as a loop bound, a while condition or a scalar_offset; AWS: "
                        "'Do not ... perform Python arithmetic on it'). An offset scales by the "
                        "stride of the dim it indexes: for i * k elements, index a dim of "
                        "stride k, e.g. sb.reshape((P, n, k))[:, i, :] for sb[:, i*k:(i+1)*k]")

    __int__ = __float__ = __iter__ = _no_value
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_value
    __lt__ = __le__ = __gt__ = __ge__ = _no_value


def _kernel_frame():
    f = sys._getframe(1)
    while f is not None and _core.os.path.dirname(
            _core.os.path.abspath(f.f_code.co_filename)) in _core._API_DIRS:
        f = f.f_back
    return f


def is_register(x):
    return isinstance(x, VirtualRegister)


def _register(x, what):
    if not is_register(x):
        raise error(f"{what} must be a VirtualRegister (nisa.register_alloc()), got "
                    f"{type(x).__name__}")
    if x.frozen:
        raise error(f"{what}: {x!r} is frozen (a loop's induction value, passed by value: "
                    "writing it has no effect on the loop)")
    return x


def _scalar_tensor(t, what):
    if not isinstance(t, Tensor):
        raise error(f"{what} must be an NKI tensor of one element, got {type(t).__name__}")
    if t.numel() != 1:
        raise error(f"{what} has shape {t.shape}: a register moves one value ([1] or [1, 1])")
    if t.buffer is _core.psum:
        raise error(f"{what} is in PSUM: registers load from and store to HBM or SBUF")
    if t.dtype.name not in _INT_DTYPES:
        raise error(f"{what} is {t.dtype}: a register holds a 32-bit integer, and how the "
                    "hardware converts a float value into one is not published; convert it "
                    "first (nisa.tensor_copy to an nl.int32 tile)")
    return t


def _copy(tracer, dst, src):
    """One value between a register and a tensor (or two registers): a DMA when HBM is on
    either side, else one element on GpSimd (timed as such: the register instructions' own
    cost is not published)."""
    hbm = not dst._buffer.on_chip or not src._buffer.on_chip
    op, engine = (OP_DMA, DMA) if hbm else (OP_COPY, GPSIMD)
    return tracer.emit(op, engine, dst.reshape((1, 1)) if dst.ndim != 2 else dst,
                       src.reshape((1, 1)) if src.ndim != 2 else src)


def register_alloc(x=None):
    """A new register, initialised with `x` when given (an int, or a one-element tensor)."""
    return VirtualRegister(x)


def register_move(dst, src):
    """dst <- a constant integer or another register's value."""
    tracer = _core.current_tracer()
    dst = _register(dst, "nisa.register_move: dst")
    if is_register(src):
        _copy(tracer, dst.written(), src.read("nisa.register_move"))
        return None
    if not _core._is_int(src):
        raise error(f"nisa.register_move: src must be an int known at specialisation or a "
                    f"VirtualRegister, got {type(src).__name__}")
    _check_int32(int(src), "nisa.register_move:")
    tracer.emit(OP_MEMSET, GPSIMD, dst.written(), imm0=float(int(src)))
    return None


def register_load(dst, src):
    """dst <- the one integer value of `src` (HBM or SBUF), read when the kernel runs."""
    tracer = _core.current_tracer()
    dst = _register(dst, "nisa.register_load: dst")
    _copy(tracer, dst.written(), _scalar_tensor(src, "nisa.register_load: src"))
    return None


def register_store(dst, src):
    """The register's value into the one element of `dst` (HBM or SBUF)."""
    tracer = _core.current_tracer()
    if not is_register(src):
        raise error(f"nisa.register_store: src must be a VirtualRegister, got "
                    f"{type(src).__name__}")
    _copy(tracer, _scalar_tensor(dst, "nisa.register_store: dst"), src.read("nisa.register_store"))
    return None


# -- device loops


def begin_loop(tracer, kind, lower=None, upper=None, step=1, condition=None, key=None):
    """Emits a loop's begin; returns the induction register of a counted loop."""
    location = _core.caller_location()
    if kind == "while":
        index = tracer.emit(_core.OP_LOOP_BEGIN, GPSIMD, None, condition.read("a while loop"),
                            axes=1)
        induction = None
    else:
        induction = VirtualRegister(frozen=True)
        views = {}
        params = {"imm2": float(step)}
        several = tracer.grid_size() > 1
        for slot, imm, bound in (("a", "imm0", lower), ("b", "imm1", upper)):
            if not is_register(bound):
                _check_int32(int(bound), "a device loop bound")
                if not several:
                    params[imm] = float(int(bound))
                    continue
                # In a multi-program launch the loop may become the cores' joint loop, which
                # takes each core's bounds from registers.
                bound = VirtualRegister(int(bound))
            views[slot] = bound.read("a device loop's bound")
        index = tracer.emit(_core.OP_LOOP_BEGIN, GPSIMD, induction.tile(), views.get("a"),
                            views.get("b"), axes=0, **params)
    tracer.open_loops.append({"kind": kind, "begin": index, "location": location, "key": key})
    return induction


def end_loop(tracer):
    tracer.emit(_core.OP_LOOP_END, GPSIMD)
    tracer.open_loops.pop()


def _counted_bounds(name, lower, upper, step):
    if not _core._is_int(step) or int(step) <= 0:
        raise error(f"{name}: step must be a positive integer known at specialisation (it is "
                    f"not a register), got {step!r}")
    for v in (lower, upper):
        if not (_core._is_int(v) or is_register(v)):
            raise error(f"{name}: a bound must be an int or a VirtualRegister, got "
                        f"{type(v).__name__}")


class DeviceRange:
    """``for i in nl.dynamic_range(...)`` with a register bound: the loop body (the for
    statement's) is traced once, between the loop's begin and end; ``i`` is the induction
    register."""

    def __init__(self, lower, upper, step):
        self.lower, self.upper, self.step = lower, upper, step
        self._state = 0

    def __iter__(self):
        return self

    def __next__(self):
        tracer = _core.current_tracer()
        if self._state == 0:
            self._state = 1
            self._depth = len(tracer.open_loops)
            return begin_loop(tracer, "for", self.lower, self.upper, self.step)
        if self._state == 1:
            self._state = 2
            if len(tracer.open_loops) != self._depth + 1:
                raise error("a device loop inside this nl.dynamic_range loop was left before its "
                            "body ended (break / return): device loops run their body to its end",
                            tracer.open_loops[-1]["location"])
            end_loop(tracer)
        raise StopIteration


def dynamic_range(start, stop=None, step=1):
    if stop is None:
        start, stop = 0, start
    _counted_bounds("nl.dynamic_range", start, stop, step)
    return DeviceRange(start, stop, int(step))


def fori_loop(lower, upper, body_fun, step=1):
    _counted_bounds("nl.fori_loop", lower, upper, step)
    tracer = _core.current_tracer()
    i = begin_loop(tracer, "for", lower, upper, int(step))
    if body_fun(i) is not None:
        raise error("nl.fori_loop: the body function returns nothing (carry loop state in "
                    "SBUF / HBM tensors)")
    end_loop(tracer)


def while_loop(init, body_fun):
    """Runs body_fun(r) while the condition register is non-zero, tested before every
    iteration; the body returns the next condition (a register or an int)."""
    tracer = _core.current_tracer()
    if not (is_register(init) or _core._is_int(init)):
        raise error(f"nl.while_loop: init must be a VirtualRegister or an int, got "
                    f"{type(init).__name__}")
    # The loop's own condition register: init keeps its value.
    cond = VirtualRegister(init)
    begin_loop(tracer, "while", condition=cond)
    r = VirtualRegister(cond)  # the body's copy, passed by value
    nxt = body_fun(r)
    if nxt is None:
        raise error("nl.while_loop: the body function must return the next condition (a "
                    "VirtualRegister, or an int)")
    if not (is_register(nxt) or _core._is_int(nxt)):
        raise error(f"nl.while_loop: the body returned {type(nxt).__name__}; the next "
                    "condition is a VirtualRegister or an int")
    register_move(cond, nxt)
    end_loop(tracer)
