"""The operations of NKI (``nl.add``, ``nl.exp``, ``nl.sum``, ...) as the instructions name
them: each carries its ALU code (nrtsim::nki::Alu) and / or activation code (nrtsim::nki::Act),
which ``nki.isa`` instructions take as ``op=``. Calling one as a function (``nl.add(x, y)``) is
``nki.language``'s business: it installs the implementations (``bind``), so that this module,
``nki.isa`` and ``nki._core`` need nothing from ``nki.language`` (the imports form no circle:
_core <- _ops <- isa <- language).
"""

from __future__ import annotations

import builtins
import math
import operator

from nki import _core


class Op:
    """An operation: ``kind`` is how nki.language computes it on tiles ("binary", "unary",
    "reduce"), or "argument" / "refused" for names that are only ``op=`` values."""

    def __init__(self, name, kind, alu=None, act=None, py=None):
        self.name = name
        self.kind = kind
        self.alu = alu
        self.act = act
        self.py = py
        self._impl = None

    def __call__(self, *args, **kwargs):
        if self.kind == "refused":
            raise _core.error(_core.REFUSED[f"nki.language.{self.name}"])
        if self._impl is None:
            raise _core.error(f"nl.{self.name} is an op= argument, not a function")
        return self._impl(self, *args, **kwargs)

    def __repr__(self):
        return f"nl.{self.name}"


def _unary_op(name, act=None, alu=None, py=None):
    return Op(name, "unary", alu=alu, act=act, py=py)


def _binary_op(name, alu, py):
    return Op(name, "binary", alu=alu, py=py)


def bind(kind, impl):
    """nki.language installs how every operation of `kind` computes on tiles; the operation's
    signature is the implementation's, less its first parameter (the operation itself)."""
    import inspect

    sig = inspect.signature(impl)
    sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    for op in ALL:
        if op.kind == kind:
            op._impl = impl
            op.__signature__ = sig


# ALU codes (nrtsim::nki::Alu) and activation codes (nrtsim::nki::Act).
add = _binary_op("add", 1, operator.add)
subtract = _binary_op("subtract", 2, operator.sub)
multiply = _binary_op("multiply", 3, operator.mul)
divide = _binary_op("divide", 4, operator.truediv)
maximum = _binary_op("maximum", 5, builtins.max)
minimum = _binary_op("minimum", 6, builtins.min)
power = _binary_op("power", 7, operator.pow)
fmod = _binary_op("fmod", 8, math.fmod)
equal = _binary_op("equal", 9, lambda a, b: float(a == b))
not_equal = _binary_op("not_equal", 10, lambda a, b: float(a != b))
greater = _binary_op("greater", 11, lambda a, b: float(a > b))
greater_equal = _binary_op("greater_equal", 12, lambda a, b: float(a >= b))
less = _binary_op("less", 13, lambda a, b: float(a < b))
less_equal = _binary_op("less_equal", 14, lambda a, b: float(a <= b))
logical_and = _binary_op("logical_and", 15, lambda a, b: float(bool(a) and bool(b)))
logical_or = _binary_op("logical_or", 16, lambda a, b: float(bool(a) or bool(b)))
logical_xor = _binary_op("logical_xor", 17, lambda a, b: float(bool(a) != bool(b)))
bitwise_and = _binary_op("bitwise_and", 18, operator.and_)
bitwise_or = _binary_op("bitwise_or", 19, operator.or_)
bitwise_xor = _binary_op("bitwise_xor", 20, operator.xor)
abs_max = _binary_op("abs_max", 21, lambda a, b: builtins.max(builtins.abs(a), builtins.abs(b)))
abs_min = _binary_op("abs_min", 22, lambda a, b: builtins.min(builtins.abs(a), builtins.abs(b)))

exp = _unary_op("exp", 1, py=math.exp)
log = _unary_op("log", 2, py=math.log)
sqrt = _unary_op("sqrt", 3, py=math.sqrt)
rsqrt = _unary_op("rsqrt", 4, py=lambda a: 1 / math.sqrt(a))
reciprocal = _unary_op("reciprocal", 5, py=lambda a: 1 / a)
tanh = _unary_op("tanh", 6, py=math.tanh)
sigmoid = _unary_op("sigmoid", 7, py=lambda a: 1 / (1 + math.exp(-a)))
relu = _unary_op("relu", 8, py=lambda a: builtins.max(a, 0))
gelu = _unary_op("gelu", 9, py=lambda a: 0.5 * a * (1 + math.erf(a / math.sqrt(2))))
gelu_apprx_tanh = _unary_op("gelu_apprx_tanh", 10)
silu = _unary_op("silu", 11, py=lambda a: a / (1 + math.exp(-a)))
softplus = _unary_op("softplus", 12, py=lambda a: math.log1p(math.exp(a)))
erf = _unary_op("erf", 13, py=math.erf)
sin = _unary_op("sin", 14, py=math.sin)
cos = _unary_op("cos", 15, py=math.cos)
# As an ALU op (tensor_scalar's op0 with operand 0, a unary op of the Vector engine) abs is
# abs_max(x, 0) = |x|.
abs = _unary_op("abs", 16, alu=21, py=lambda a: a if a >= 0 else -a)  # noqa: A001
square = _unary_op("square", 17, py=lambda a: a * a)
sign = _unary_op("sign", 18, py=lambda a: float((a > 0) - (a < 0)))
negative = _unary_op("negative", 19, py=operator.neg)
mish = _unary_op("mish", 20)
arctan = _unary_op("arctan", 21, py=math.atan)

tan = _unary_op("tan", 22, py=math.tan)
ceil = _unary_op("ceil", 23, py=math.ceil)
floor = _unary_op("floor", 24, py=math.floor)
trunc = _unary_op("trunc", 25, py=math.trunc)
gelu_dx = _unary_op("gelu_dx", 26)
gelu_apprx_sigmoid = _unary_op("gelu_apprx_sigmoid", 27)
gelu_apprx_sigmoid_dx = _unary_op("gelu_apprx_sigmoid_dx", 28)
silu_dx = _unary_op("silu_dx", 29)
erf_dx = _unary_op("erf_dx", 30)
logical_not = _unary_op("logical_not", 31, py=lambda a: float(not a))
left_shift = _binary_op("left_shift", 23, operator.lshift)
right_shift = _binary_op("right_shift", 24, operator.rshift)
mod = _binary_op("mod", 25, lambda a, b: a % b)
# Operation names used as `op=` arguments only: bypass (pass data through a tensor_scalar stage),
# average (tensor_partition_reduce), prelu (x > 0 ? x : relu_param * x; nisa.activate2 takes its
# slope).
bypass = Op("bypass", "argument", alu=0, act=0)
average = Op("average", "argument", alu=1)
prelu = Op("prelu", "argument", act=32)


# Reductions also name their ALU operation, so nisa.tensor_reduce(op=nl.max) works.
sum = Op("sum", "reduce", alu=1)  # noqa: A001
max = Op("max", "reduce", alu=5)  # noqa: A001
min = Op("min", "reduce", alu=6)  # noqa: A001
prod = Op("prod", "reduce", alu=3)
all = Op("all", "reduce", alu=15)  # noqa: A001
REDUCE_ALU = {"sum": add, "max": maximum, "min": minimum, "prod": multiply, "all": logical_and}

ALL = [v for v in list(globals().values()) if isinstance(v, Op)]
BY_NAME = {op.name: op for op in ALL}
# NumPy ufuncs as op= values (the legacy API's kernels pass np.add, np.maximum, np.exp, ...).
_NUMPY = {"true_divide": "divide", "absolute": "abs", "arctan": "arctan", "bitwise_and":
          "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor"}


def resolve(op):
    """`op` as an Op: NKI operations pass through; a NumPy ufunc maps to the operation of its name
    (recorded for the legacy migration report)."""
    if isinstance(op, Op) or hasattr(op, "alu") or hasattr(op, "act"):
        return op
    name = getattr(op, "__name__", None)
    if type(op).__name__ == "ufunc" and name is not None:
        mapped = BY_NAME.get(_NUMPY.get(name, name))
        if mapped is not None:
            tracer = _core.current_tracer(optional=True)
            if tracer is not None and tracer.legacy_uses is not None:
                file, line = _core.caller_location()
                tracer.legacy_uses.append((file, line, f"np.{name} as op=", f"nl.{mapped.name}"))
            return mapped
    reduction = _numpy_reduction(op)
    if reduction is not None:
        # np.max / np.min / np.sum / np.prod as a reduction's op= (the legacy API's kernels pass
        # them to tensor_reduce): the ALU operation the reduction folds with. Legacy kernels only.
        tracer = _core.current_tracer(optional=True)
        if tracer is not None and tracer.legacy_uses is not None:
            mapped = BY_NAME[reduction]
            file, line = _core.caller_location()
            tracer.legacy_uses.append((file, line, f"np.{name} as op=", f"nl.{mapped.name}"))
            return mapped
    return op


def _numpy_reduction(op):
    try:
        import numpy as np
    except ImportError:
        return None
    for fn, name in ((np.max, "maximum"), (np.min, "minimum"), (np.sum, "add"),
                     (np.prod, "multiply")):
        if op is fn:
            return name
    return None
