"""What the model and pipeline tests share: one run on each side and the comparison."""

from __future__ import annotations

from typing import Callable

import torch

import torch_neuronx

from diffusers_tolerance import WIDER, agreement, noise_drawn_in

DTYPES = [torch.float32, torch.bfloat16]


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


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
