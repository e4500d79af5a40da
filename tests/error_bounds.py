"""Error bounds that follow from the arithmetic of a CPU run, shared by the suites that hold neuron
to CPU's results (ModuleInfo parity, the layout fuzzer, the Diffusers models).

Neuron runs the same ATen math as CPU, but a kernel may sum in another order (another blocking,
thread count or kernel), and in a narrow dtype a difference of one float32 ulp before the final
rounding can flip the rounded result by one ulp of that dtype. A CPU run under ErrorBounds (a
dispatch mode that sees every ATen op) gives each floating result a bound, in units of its
magnitude:

    bound(result) = max(bound(inputs)) + 2 * (u_out + K * u_acc)

- u_out: the unit roundoff of the result's dtype, for its one rounding (float32 2^-24, bfloat16
  2^-8).
- K * u_acc: a sum of K terms carries up to K * u_acc relative error (the classical recursive
  summation bound, relative to the sum of the terms' magnitudes). CPU kernels accumulate float32
  and bfloat16 in float32, so u_acc = 2^-24 (float64 in float64). K is the op's accumulation
  length (accumulation_length below).
- The factor 2: each device's result lies within the bound of the exact value, so the two differ
  by at most twice it. Errors along a chain add up; views and widening copies add nothing.

check_within holds a neuron tensor to a bound: every finite element satisfies
``|neuron - cpu| <= bound * max(max|cpu|, smallest normal)``, NaNs and infinities where CPU's are,
integers equal."""

from __future__ import annotations

import math

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakTensorKeyDictionary

from parity import Mismatch

U_ACC = 2.0**-24  # CPU kernels accumulate float32 and bfloat16 in float32
UNIT_ROUNDOFF = {
    torch.float32: 2.0**-24,
    torch.bfloat16: 2.0**-8,
    torch.float16: 2.0**-11,
    torch.float64: 2.0**-53,
}

# Matrix products: the accumulation length is the contracted size, the last dimension of the
# first matrix operand (its position in the op's arguments).
MATMUL_FIRST_OPERAND = {
    "mm": 0,
    "bmm": 0,
    "matmul": 0,
    "dot": 0,
    "vdot": 0,
    "mv": 0,
    "linear": 0,
    "_trilinear": 0,
    "addmm": 1,
    "baddbmm": 1,
    "addbmm": 1,
    "addmv": 1,
    "_addmm_activation": 1,
    "addr": 1,
}
CONVOLUTIONS = {
    "convolution",
    "_convolution",
    "convolution_overrideable",
    "mkldnn_convolution",
    "_slow_conv2d_forward",
    "slow_conv3d_forward",
    "slow_conv_transpose2d",
    "slow_conv_transpose3d",
    "_mkldnn_convolution",
    "slow_conv_dilated2d",
    "slow_conv_dilated3d",
    "thnn_conv2d",
    "_nnpack_spatial_convolution",
}
CONVOLUTION_BACKWARDS = {"convolution_backward", "convolution_backward_overrideable"}
# Fused CPU kernels that round to the input dtype inside (besides their result's own rounding).
FUSED_ROUNDINGS = {
    "_scaled_dot_product_flash_attention_for_cpu": 1,  # probabilities before P @ V
    "_scaled_dot_product_flash_attention_for_cpu_backward": 2,  # probabilities, dP
}
# Copies that do not round when the destination is at least as precise as the source.
COPIES = {
    "_to_copy",
    "copy_",
    "clone",
    "copy",
    "lift_fresh_copy",
    "_copy_from",
    "_copy_from_and_resize",
    "detach_copy",
    "alias_copy",
}


def floating(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype.is_floating_point


def accumulation_length(name: str, func, args, inputs, outputs) -> int:
    if name in MATMUL_FIRST_OPERAND:
        position = MATMUL_FIRST_OPERAND[name]
        operand = args[position] if len(args) > position else None
        if isinstance(operand, torch.Tensor) and operand.dim() > 0:
            return operand.shape[-1] * (operand.shape[0] if name == "addbmm" else 1)
    if name in CONVOLUTIONS and len(args) > 1 and isinstance(args[1], torch.Tensor):
        # weight: (out, in/groups, *kernel), or (in, out/groups, *kernel) when transposed; an
        # output sums over in/groups channels times the kernel (transposed: at most in x kernel).
        weight = args[1]
        transposed = "transpose" in name or (
            name in ("convolution", "_convolution", "convolution_overrideable")
            and len(args) > 6
            and bool(args[6])
        )
        return weight.numel() // max(weight.shape[1 if transposed else 0], 1)
    if name in CONVOLUTION_BACKWARDS and len(args) > 2:
        grad_output, weight = args[0], args[2]
        # grad_weight sums over the batch and output positions; grad_input over the other side's
        # channels times the kernel (either layout: the larger of the two).
        per_weight = grad_output.numel() // max(grad_output.shape[1], 1)
        per_input = max(
            weight.numel() // max(weight.shape[0], 1), weight.numel() // max(weight.shape[1], 1)
        )
        return max(per_weight, per_input)
    largest = max((t.numel() for t in inputs), default=1)
    sizes = [t.numel() for t in outputs if t.numel() > 0]
    ratio = math.ceil(largest / min(sizes)) if sizes else 1
    if ratio > 1 or torch.Tag.pointwise in func.tags:
        return max(ratio, 1)
    # Shape kept, not pointwise: it sums along at most one dimension, or several if it takes a
    # list of dims (a norm's normalised shape).
    biggest = max(inputs, key=lambda t: t.numel(), default=None)
    if biggest is None or biggest.dim() == 0:
        return 1
    lists = any(
        isinstance(a, (list, tuple)) and a and all(isinstance(x, int) for x in a) for a in args[1:]
    )
    return biggest.numel() if lists else max(biggest.shape)


def draws(func, args, kwargs) -> bool:
    """Whether an op tagged nondeterministic_seeded draws here: the fused attention kernels and
    native_dropout carry the tag for their dropout, which draws nothing at probability 0 or
    outside training."""
    named = {a.name: a.default_value for a in func._schema.arguments if a.has_default_value()}
    named.update(kwargs)
    for argument, value in zip(func._schema.arguments, args):
        named[argument.name] = value
    if named.get("train") is False:
        return False
    for name in ("dropout_p", "p"):
        if name in named and isinstance(named[name], (int, float)) and named[name] == 0:
            return False
    return True


class ErrorBounds(TorchDispatchMode):
    """Gives every floating result of an ATen op an error bound, in units of its magnitude, that
    the CPU arithmetic leading to it allows; notes whether any op draws random numbers."""

    def __init__(self):
        super().__init__()
        self.bound = WeakTensorKeyDictionary()
        self.largest = 0.0
        self.seeded = False

    def of(self, t: torch.Tensor) -> float:
        """A tensor's bound; one the run did not produce gets the run's largest."""
        return self.bound.get(t, self.largest)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if torch.Tag.nondeterministic_seeded in func.tags and draws(func, args, kwargs):
            self.seeded = True
        inputs = [t for t in pytree.tree_leaves((args, kwargs)) if floating(t)]
        outputs = [t for t in pytree.tree_leaves(out) if floating(t)]
        if not outputs:
            return out
        start = max((self.bound.get(t, 0.0) for t in inputs), default=0.0)
        name = func._schema.name.removeprefix("aten::")
        out_dtype = outputs[0].dtype
        exact_copy = name in COPIES and all(
            UNIT_ROUNDOFF.get(t.dtype, 0.0) >= UNIT_ROUNDOFF.get(out_dtype, 0.0) for t in inputs
        )
        if func.is_view or exact_copy:
            bound = start
        else:
            roundings = 1 + FUSED_ROUNDINGS.get(name, 0)
            length = accumulation_length(name, func, args, inputs, outputs)
            unit = UNIT_ROUNDOFF.get(out_dtype, 2.0**-24)
            bound = start + 2 * (roundings * unit + length * min(U_ACC, unit))
        for t in outputs:
            self.bound[t] = bound
        self.largest = max(self.largest, bound)
        return out


def check_within(actual: torch.Tensor, expected: torch.Tensor, bound: float, where: str) -> float:
    """Raises Mismatch where neuron's `actual` (same dtype and shape as CPU's `expected`) is off by
    more than `bound` allows (module docstring); returns the largest difference as a fraction of
    what is allowed (0: bit-identical)."""
    a, e = actual.detach().to("cpu"), expected.detach()
    if not (e.dtype.is_floating_point or e.dtype.is_complex):
        if not torch.equal(a, e):
            differ = int((a != e).sum())
            raise Mismatch(f"{where}: {differ} of {e.numel()} elements differ (exact dtype)")
        return 0.0
    if e.dtype.is_complex:  # real and imaginary parts, each held to the bound
        a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
    a, e = a.double(), e.double()
    finite = e.isfinite()
    infinite = e.isinf()
    if not torch.equal(a.isnan(), e.isnan()) or not torch.equal(a[infinite], e[infinite]):
        raise Mismatch(f"{where}: NaN/inf positions differ from CPU's")
    if not bool(a[finite].isfinite().all()):
        raise Mismatch(f"{where}: neuron has NaN/inf where CPU's values are finite")
    if not bool(finite.any()):
        return 0.0
    scale = max(float(e[finite].abs().max()), torch.finfo(expected.dtype).tiny)
    allowed = bound * scale
    diff = (a[finite] - e[finite]).abs()
    largest = float(diff.max())
    if largest == 0.0:
        return 0.0
    if largest > allowed:
        index = int(diff.argmax())
        raise Mismatch(
            f"{where}: max |neuron - cpu| = {largest:.3g} > allowed {allowed:.3g} "
            f"(bound {bound:.3g} x scale {scale:.3g}); at flat index {index}: neuron "
            f"{float(a[finite][index]):.6g}, CPU {float(e[finite][index]):.6g}; "
            f"{int((diff > allowed).sum())} of {diff.numel()} elements outside"
        )
    return largest / allowed
