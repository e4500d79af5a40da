"""Diffusers models on neuron against CPU: the DDPM UNet with attention blocks, an SD-style
conditional UNet, a VAE, and the FLUX, Qwen-Image and Qwen-Image 2.1 transformers, tiny and
random (diffusers_tiny.py), one forward each, in float32 and bfloat16.

The neuron result must be within what the dtype's rounding allows (diffusers_tolerance.py: twice the CPU's
own rounding error, measured against the same model in the next wider dtype, plus one rounding),
and no op may go to the CPU fallback."""

from __future__ import annotations

import copy

import pytest
import torch

from diffusers_check import DTYPES, assert_neuron_matches_cpu, dtype_id
from diffusers_tiny import MODELS
from diffusers_tolerance import cast

pytest.importorskip("diffusers")

RESULTS: dict[str, object] = {}  # "model dtype" -> Agreement, for the session summary


def _output(result) -> torch.Tensor:
    if isinstance(result, torch.Tensor):
        return result
    return result[0]  # a Diffusers output dataclass or tuple: its sample comes first


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_cpu(name, dtype):
    model, inputs = MODELS[name]()
    model = model.eval().to(dtype)
    inputs = cast(inputs, dtype)

    def run(device, run_dtype):
        on_device = copy.deepcopy(model).to(device=device, dtype=run_dtype)
        return _output(on_device(**cast(inputs, run_dtype, device)))

    assert_neuron_matches_cpu(run, dtype, name, RESULTS)
