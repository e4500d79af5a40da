"""What the model and pipeline tests share: one run on each side, the comparison, the known
failure's mark."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

import torch_neuronx

from diffusers_tolerance import WIDER, agreement, noise_drawn_in

# Issue 27 item 1, being fixed at its root on the i27-core branch: add/mul of two 4-D
# channels-last operands return the CPU result's memory order with contiguous strides.
# AttnDownBlock2D's attention processor hands back such a residual; the UNet's output is 0.3 away.
KNOWN_CHANNELS_LAST = ("binary ops on two channels-last operands mislabel their result's layout "
                       "(issue 27 item 1; fixed at its root by the i27-core work)")
DTYPES = [torch.float32, torch.bfloat16]


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def marked(names, known: str) -> list:
    """The names, `known` marked as a strict xfail: the fix turns it into a failure that asks
    for the mark to go."""
    return [pytest.param(name, marks=pytest.mark.xfail(reason=KNOWN_CHANNELS_LAST, strict=True))
            if name == known else name for name in names]


def assert_neuron_matches_cpu(run: Callable[[str, torch.dtype], torch.Tensor],
                              dtype: torch.dtype, name: str, results: dict) -> None:
    """`run(device, dtype)` computes the output from scratch. It runs on the CPU, on the CPU in
    the wider dtype (with the same noise), and on neuron; the neuron output must be within the
    tolerance (diffusers_tolerance.py) and no op may have gone to the CPU fallback."""
    with torch.no_grad():
        cpu = run("cpu", dtype)
        with noise_drawn_in(dtype):
            reference = run("cpu", WIDER[dtype])
        torch_neuronx.clear_op_tracking()
        neuron = run("neuron", dtype)
        fallbacks = torch_neuronx.get_fallback_ops()
    assert neuron.device.type == "neuron" and neuron.dtype == cpu.dtype == dtype
    assert neuron.shape == cpu.shape
    assert cpu.abs().sum() > 0  # an output, not zeros
    result = agreement(neuron, cpu, reference, dtype)
    results[f"{name} {dtype_id(dtype)}"] = result
    assert result.ok, f"{name} in {dtype}: {result}"
    assert fallbacks == [], f"ops that fell back to the CPU: {fallbacks}"
