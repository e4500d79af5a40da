"""Hypothesis strategies that build one call of an op on CPU tensors: shapes (0-d and zero-size
included), dtypes (mixed, for type promotion), layouts (layouts.py), CPU scalar operands, and the
form of the call (functional, out=, in-place).

A Call holds CPU tensors only; check.py copies them to neuron keeping their storage, strides and
offsets (CPU scalar operands stay on CPU, as they would in a user's program)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from hypothesis import strategies as st
from torch.testing import make_tensor

from .catalogue import family, fuzz_dtypes
from .layouts import Layout, describe, layouts

MAX_SIDE = 5
MAX_DIMS = 5


@dataclasses.dataclass(repr=False)
class Call:
    op: Any  # the OpInfo
    form: str  # "functional", "out" or "inplace"
    fn: Callable
    input: Any
    args: tuple
    kwargs: dict
    # ids of CPU tensors that stay on CPU in the neuron run (0-dim CPU scalar operands)
    host: set = dataclasses.field(default_factory=set)
    layouts: dict = dataclasses.field(default_factory=dict)  # id(tensor) -> Layout

    def run(self):
        return self.fn(self.input, *self.args, **self.kwargs)

    def __repr__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """The call as a reader of a failure needs it to reproduce it."""

        def show(v):
            if isinstance(v, torch.Tensor):
                where = "CPU scalar tensor" if id(v) in self.host else self.layouts.get(id(v), "")
                return f"<{describe(v)} {where}>".replace(" >", ">")
            if isinstance(v, (list, tuple)):
                inner = ", ".join(show(x) for x in v)
                return f"[{inner}]" if isinstance(v, list) else f"({inner})"
            if isinstance(v, dict):
                return "{" + ", ".join(f"{k}={show(x)}" for k, x in v.items()) + "}"
            return repr(v)

        return (f"{self.op.name} ({self.form}): input={show(self.input)} args={show(self.args)} "
                f"kwargs={show(self.kwargs)}")


def shapes(min_dims: int = 0, max_dims: int = MAX_DIMS) -> st.SearchStrategy:
    return st.lists(st.integers(0, MAX_SIDE), min_size=min_dims, max_size=max_dims).map(tuple)


def laid_out(draw, tensor: torch.Tensor, registry: dict, allow_expand: bool) -> torch.Tensor:
    layout: Layout = draw(layouts(tuple(tensor.shape), allow_expand))
    result = layout.apply(tensor)
    result.requires_grad_(False)
    registry[id(result)] = layout
    return result


def _values(draw, shape, dtype, **make_kwargs) -> torch.Tensor:
    generator_seed = draw(st.integers(0, 2**31 - 1))
    torch.manual_seed(generator_seed)
    return make_tensor(shape, dtype=dtype, device="cpu", **make_kwargs)


def _domain(op, dtype) -> dict:
    low, high = getattr(op, "domain", (None, None))
    floating = dtype.is_floating_point or dtype.is_complex
    eps = getattr(op, "_domain_eps", 1e-5)
    return {
        "low": None if low is None else (low + eps if floating else low),
        "high": None if high is None else (high - eps if floating else high),
    }


@st.composite
def unary_call(draw, op) -> Call:
    dtype = draw(st.sampled_from(fuzz_dtypes(op)))
    shape = draw(shapes())
    registry: dict = {}
    x = laid_out(draw, _values(draw, shape, dtype, **_domain(op, dtype)), registry, True)
    kwargs, _ = op.sample_kwargs("cpu", dtype, x)
    return Call(op, "functional", op, x, (), dict(kwargs), layouts=registry)


def _broadcast_pair(draw) -> tuple[tuple, tuple]:
    result = draw(shapes())
    operands = []
    for _ in range(2):
        keep = draw(st.integers(0, len(result)))
        shape = list(result[len(result) - keep:])
        for i in range(len(shape)):
            if draw(st.integers(0, 3)) == 0:
                shape[i] = 1
        operands.append(tuple(shape))
    return operands[0], operands[1]


def _python_scalar(draw, dtype: torch.dtype, exclude_zero: bool):
    if dtype == torch.bool:
        return draw(st.booleans())
    if dtype.is_complex:
        value = complex(draw(st.sampled_from([0.5, -1.25, 2.0])), draw(st.sampled_from([1.0, -0.5])))
    elif dtype.is_floating_point:
        value = draw(st.sampled_from([0.0, 0.5, -1.25, 2.0, 3.0, -0.0]))
    else:
        value = draw(st.integers(-3, 5))
    if exclude_zero and value == 0:
        value = type(value)(1)
    return value


@st.composite
def binary_call(draw, op) -> Call:
    dtypes = fuzz_dtypes(op)
    lhs_dtype = draw(st.sampled_from(dtypes))
    # Type promotion: the other operand's dtype is another supported one half the time.
    rhs_dtype = draw(st.sampled_from(dtypes)) if draw(st.booleans()) else lhs_dtype
    lhs_shape, rhs_shape = _broadcast_pair(draw)
    registry: dict = {}
    host: set = set()
    lhs = laid_out(draw, _values(draw, lhs_shape, lhs_dtype, **op.lhs_make_tensor_kwargs),
                   registry, True)
    rhs_kind = draw(st.sampled_from(
        ["tensor", "tensor", "same tensor", "cpu scalar tensor"]
        + (["python scalar"] if op.supports_rhs_python_scalar else [])
    ))
    exclude_zero = bool(op.rhs_make_tensor_kwargs.get("exclude_zero", False))
    if rhs_kind == "python scalar":
        rhs = _python_scalar(draw, rhs_dtype, exclude_zero)
    elif rhs_kind == "cpu scalar tensor":
        rhs = _values(draw, (), rhs_dtype, **op.rhs_make_tensor_kwargs)
        host.add(id(rhs))
    elif rhs_kind == "same tensor":
        rhs = lhs  # aliasing operands: x op x
    else:
        rhs = laid_out(draw, _values(draw, rhs_shape, rhs_dtype, **op.rhs_make_tensor_kwargs),
                       registry, True)
    kwargs, _ = op.sample_kwargs("cpu", lhs_dtype, lhs)
    return Call(op, "functional", op, lhs, (rhs,), dict(kwargs), host, registry)


@st.composite
def reduction_call(draw, op) -> Call:
    dtype = draw(st.sampled_from(fuzz_dtypes(op)))
    shape = draw(shapes())
    registry: dict = {}
    x = laid_out(draw, _values(draw, shape, dtype), registry, True)
    ndim = max(len(shape), 1)
    choice = draw(st.sampled_from(["default", "dim", "dims"] if op.supports_multiple_dims
                                  else ["default", "dim"]))
    reduction: dict = {}
    if choice == "dim":
        reduction = {"dim": draw(st.integers(-ndim, ndim - 1)), "keepdim": draw(st.booleans())}
    elif choice == "dims":
        dims = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
        reduction = {"dim": tuple(dims), "keepdim": draw(st.booleans())}
    variants = list(op.generate_args_kwargs(x, **reduction))
    args, kwargs = draw(st.sampled_from(variants)) if variants else ((), {})
    kwargs = dict(kwargs)
    kwargs.update(reduction)
    return Call(op, "functional", op, x, tuple(args), kwargs, layouts=registry)


@st.composite
def sample_call(draw, op, samples_of: Callable) -> Call:
    """One of the OpInfo's own samples, every tensor in it laid out anew (values kept: the
    sample's values may have to satisfy the op, a positive-definite matrix, sorted boundaries)."""
    dtype = draw(st.sampled_from(fuzz_dtypes(op)))
    samples = samples_of(op, dtype)
    if not samples:
        return None
    sample = draw(st.sampled_from(samples))
    registry: dict = {}
    memo: dict = {}

    def relay(value):
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided or value.is_quantized:
                return value  # as the sample made it (sparse, quantized)
            if value.dim() == 0:
                return memo.setdefault(id(value), value.detach().clone())  # the sample is shared
            if id(value) not in memo:  # a tensor used twice stays one tensor (aliasing kept)
                memo[id(value)] = laid_out(draw, value.detach(), registry, False)
            return memo[id(value)]
        if isinstance(value, list):
            return [relay(v) for v in value]
        if isinstance(value, tuple) and not isinstance(value, torch.Size):
            return tuple(relay(v) for v in value)
        if isinstance(value, dict):
            return {k: relay(v) for k, v in value.items()}
        return value

    return Call(op, "functional", op, relay(sample.input), relay(tuple(sample.args)),
                relay(dict(sample.kwargs)), layouts=registry)


def functional_call(op, samples_of: Callable) -> st.SearchStrategy:
    kind = family(op)
    if kind == "unary":
        return unary_call(op)
    if kind == "binary":
        return binary_call(op)
    if kind == "reduction":
        return reduction_call(op)
    return sample_call(op, samples_of)


# ---------------------------------------------------------------------------------------------
# out= and in-place forms of a call


OUT_KINDS = ("exact", "laid out", "resized", "empty", "other dtype", "aliases input",
             "overlaps input")


def _overlapping_pair(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two contiguous views of one new storage, one element apart: the first holds `tensor`'s
    values, the second overlaps all of it but one element."""
    n = tensor.numel()
    storage = torch.full((n + 1,), 3, dtype=tensor.dtype)
    storage[:n].copy_(tensor.reshape(-1))
    return storage[:n].view(tensor.shape), storage[1:].view(tensor.shape)


@st.composite
def out_call(draw, call: Call, expected):
    """The call's out= form, for a call whose CPU functional result is `expected`: out= of the
    right size in some layout, of a wrong size (PyTorch resizes it and warns when it had
    elements), empty (resized silently), of another dtype (cast, or refused where the result
    cannot be cast), the input itself, or a view partly overlapping the input (refused).
    Returns (what kind of out=, the call) or None when the op cannot take out=."""
    results = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if not results or not all(isinstance(r, torch.Tensor) for r in results):
        return None
    single = isinstance(expected, torch.Tensor)
    kind = draw(st.sampled_from(OUT_KINDS))
    first = call.input if isinstance(call.input, torch.Tensor) else None
    if kind in ("aliases input", "overlaps input") and not (
        single and first is not None and id(first) not in call.host
        and first.layout == torch.strided
        and first.shape == expected.shape and first.dtype == expected.dtype
        and first.numel() >= 2 and first.stride(-1) != 0
    ):
        kind = "exact"
    call = dataclasses.replace(call, form="out", kwargs=dict(call.kwargs))
    if kind == "aliases input":
        call.kwargs["out"] = first
        return kind, call
    if kind == "overlaps input":
        call.input, call.kwargs["out"] = _overlapping_pair(first)
        return kind, call
    outs = []
    for r in results:
        if kind == "exact":
            outs.append(torch.full(r.shape, 7, dtype=r.dtype))
        elif kind == "laid out":
            outs.append(draw(layouts(tuple(r.shape))).apply(torch.full(r.shape, 7, dtype=r.dtype)))
        elif kind == "resized":
            outs.append(torch.full(tuple(s + 1 for s in r.shape) or (2,), 7, dtype=r.dtype))
        elif kind == "empty":
            outs.append(torch.empty(0, dtype=r.dtype))
        else:
            other = draw(st.sampled_from([d for d in (torch.float32, torch.float64, torch.int64,
                                                      torch.bool, torch.bfloat16) if d != r.dtype]))
            outs.append(torch.full(r.shape, 1, dtype=other))
    call.kwargs["out"] = outs[0] if single else tuple(outs)
    return kind, call


@st.composite
def inplace_call(draw, call: Call):
    """The call's in-place form (self is the input, in its layout: an expanded self must be
    refused), or for a binary op, sometimes with the other operand partly overlapping self
    (refused). Returns (what kind, the call) or None when the op has no in-place variant."""
    variant = call.op.inplace_variant
    if variant is None or not isinstance(call.input, torch.Tensor) or id(call.input) in call.host:
        return None
    call = dataclasses.replace(call, form="inplace", fn=variant, args=tuple(call.args))
    self_ = call.input
    if (family(call.op) == "binary" and self_.numel() >= 2 and call.args
            and isinstance(call.args[0], torch.Tensor) and call.args[0].dtype == self_.dtype
            and id(call.args[0]) not in call.host and draw(st.integers(0, 3)) == 0):
        call.input, other = _overlapping_pair(self_)
        call.args = (other,) + call.args[1:]
        return "other overlaps self", call
    return f"self {call.layouts.get(id(self_), 'contiguous')!r}", call

