"""How far a neuron result of a Diffusers model may be from the CPU's, from the arithmetic.

Both devices evaluate the same function of the same inputs in the same dtype; each result is the
exact value plus the error of that dtype's roundings along the way. The test measures that error
for the CPU: it runs the same model (the same weights, converted exactly) in the next wider dtype
(float32 -> float64, bfloat16 -> float32), which stands for the exact value, since its own
rounding error is smaller by the ratio of the unit roundoffs (2^-29 for float32 -> float64,
2^-16 for bfloat16 -> float32). Then

    allowed = 2 * max|cpu - wider| + u * max|wider|

- max|cpu - wider|: how far the dtype's roundings moved the CPU's result in this model, at its
  worst element. Neuron rounds the same operations in the same dtype (it runs ATen's CPU kernels
  on its own buffers, in whatever order its kernels sum), so its result is as far from the exact
  one; by the triangle inequality the two differ by at most twice that.
- u * max|wider|: one rounding of the result itself (u = 2^-24 float32, 2^-8 bfloat16), for when
  the CPU happened to land on the exact value.

A wrong kernel (a layout mislabelled, an element read from the wrong place) moves values by their
own size, far more than the dtype's rounding: the channels-last binary-op bug moved the DDPM
image by 0.31 while float32 rounding moves it by about 1e-6 and bfloat16's by about 1e-2."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import sys

import torch
from torch.utils import _pytree as pytree

WIDER = {torch.float32: torch.float64, torch.bfloat16: torch.float32}
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8}


@dataclasses.dataclass
class Agreement:
    """One comparison's numbers (the docs' table comes from them)."""

    difference: float  # max |neuron - cpu|
    cpu_error: float  # max |cpu - wider|
    allowed: float
    scale: float  # max |wider|

    @property
    def ok(self) -> bool:
        return self.difference <= self.allowed

    def __str__(self) -> str:
        return (f"max|neuron - cpu| {self.difference:.3g} vs allowed {self.allowed:.3g} "
                f"(= 2 x CPU's own rounding error {self.cpu_error:.3g} + one rounding of the "
                f"scale {self.scale:.3g})")


def agreement(neuron: torch.Tensor, cpu: torch.Tensor, wider: torch.Tensor,
              dtype: torch.dtype) -> Agreement:
    neuron, cpu, wider = (t.detach().cpu().double() for t in (neuron, cpu, wider))
    assert torch.isfinite(cpu).all() and torch.isfinite(wider).all(), "the CPU result is not finite"
    if not torch.isfinite(neuron).all():
        return Agreement(float("inf"), 0.0, 0.0, 0.0)
    cpu_error = float((cpu - wider).abs().max())
    scale = float(wider.abs().max())
    allowed = 2 * cpu_error + UNIT_ROUNDOFF[dtype] * scale
    return Agreement(float((neuron - cpu).abs().max()), cpu_error, allowed, scale)


def cast(value, dtype: torch.dtype, device=None):
    """Floating tensors of a nested input converted to `dtype` (and moved), others moved."""

    def one(t):
        t = t.to(device) if device is not None else t
        return t.to(dtype) if t.is_floating_point() else t

    return pytree.tree_map_only(torch.Tensor, one, value)


def wider_copy(module: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The module with its parameters and buffers converted exactly to the wider dtype."""
    return copy.deepcopy(module).to(WIDER[dtype])


@contextlib.contextmanager
def noise_drawn_in(dtype: torch.dtype):
    """Pipelines draw their noise with diffusers' randn_tensor in the model's dtype, and a draw in
    another dtype gives other numbers. For the wider-dtype reference to start from the same noise,
    every randn_tensor draws in `dtype` and converts the result exactly to the dtype asked for."""
    from diffusers.utils import torch_utils

    original = torch_utils.randn_tensor

    def narrow_then_widen(shape, *args, dtype_asked=None, **kwargs):
        asked = kwargs.pop("dtype", dtype_asked)
        return original(shape, *args, dtype=dtype, **kwargs).to(asked or dtype)

    patched = [m for m in list(sys.modules.values())
               if getattr(m, "__name__", "").startswith("diffusers")
               and getattr(m, "randn_tensor", None) is original]
    for module in patched:
        module.randn_tensor = narrow_then_widen
    try:
        yield
    finally:
        for module in patched:
            module.randn_tensor = original
