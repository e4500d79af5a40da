"""Diffusers pipelines on neuron against CPU, in float32 and bfloat16, with no op falling back to
the CPU:
- DDPMPipeline on a UNet2DModel with attention blocks (AttnDownBlock2D/AttnUpBlock2D), the
  unconditional sampling loop with the DDPM scheduler's noise drawn from a CPU generator;
- the FLUX and Qwen-Image text-to-image pipelines on tiny random transformers and VAEs (prompt
  embeddings given directly, so no text encoder or tokenizer is needed offline).

The images must agree within what the dtype's rounding allows (diffusers_tolerance.py), the
reference being the same pipeline with its weights converted exactly to the next wider dtype and
the same noise (drawn in the dtype under test, then converted exactly)."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_neuronx

from diffusers_tiny import ddpm_unet
from diffusers_tolerance import WIDER, agreement, noise_drawn_in

diffusers = pytest.importorskip("diffusers")

DTYPES = [torch.float32, torch.bfloat16]
# Issue 27 item 1, being fixed at its root on the i27-core branch: add/mul of two 4-D
# channels-last operands return the CPU result's memory order with contiguous strides.
# AttnDownBlock2D's attention processor hands back such a residual; the UNet's output is 0.3 away.
KNOWN_CHANNELS_LAST = ("binary ops on two channels-last operands mislabel their result's layout "
                       "(issue 27 item 1; fixed at its root by the i27-core work)")
RESULTS: dict[str, object] = {}  # "pipeline dtype" -> Agreement, for the session summary


def _ddpm(dtype):
    pipe = diffusers.DDPMPipeline(unet=ddpm_unet(),
                                  scheduler=diffusers.DDPMScheduler(num_train_timesteps=100))
    return pipe.to(dtype)


def _ddpm_images(pipe, device, dtype):
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(batch_size=1, num_inference_steps=4, output_type="pt",
               generator=torch.Generator().manual_seed(0))
    return out.images


def _flux(dtype):
    torch.manual_seed(0)
    transformer = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
        axes_dims_rope=[4, 4, 8],
    )
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKL(
        sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1,
        latent_channels=1, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
        shift_factor=0.0609, scaling_factor=1.5035,
    )
    return diffusers.FluxPipeline(
        transformer=transformer, vae=vae, scheduler=diffusers.FlowMatchEulerDiscreteScheduler(),
        text_encoder=None, tokenizer=None, text_encoder_2=None, tokenizer_2=None,
    ).to(dtype)


def _flux_images(pipe, device, dtype):
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator().manual_seed(0)
    prompt_embeds, pooled = torch.randn(1, 8, 32, generator=g), torch.randn(1, 32, generator=g)
    out = pipe(
        prompt_embeds=prompt_embeds.to(device, dtype), pooled_prompt_embeds=pooled.to(device, dtype),
        height=16, width=16, num_inference_steps=2, guidance_scale=5.0, output_type="pt",
        generator=torch.Generator().manual_seed(0),
    )
    return out.images


def _qwen_image(dtype):
    torch.manual_seed(0)
    transformer = diffusers.QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=3, joint_attention_dim=16, guidance_embeds=False,
        axes_dims_rope=(8, 4, 4),
    )
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKLQwenImage(
        base_dim=24, z_dim=4, dim_mult=[1, 2, 4], num_res_blocks=1, temperal_downsample=[False, True],
        latents_mean=[0.0] * 4, latents_std=[1.0] * 4,
    )
    return diffusers.QwenImagePipeline(
        transformer=transformer, vae=vae, scheduler=diffusers.FlowMatchEulerDiscreteScheduler(),
        text_encoder=None, tokenizer=None,
    ).to(dtype)


def _qwen_image_images(pipe, device, dtype):
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator().manual_seed(0)
    embeds, mask = torch.randn(1, 8, 16, generator=g), torch.ones(1, 8, dtype=torch.long)
    out = pipe(
        prompt_embeds=embeds.to(device, dtype), prompt_embeds_mask=mask.to(device), height=32,
        width=32, num_inference_steps=2, true_cfg_scale=1.0, output_type="pt",
        generator=torch.Generator().manual_seed(0),
    )
    return out.images


PIPELINES = {
    "ddpm": (_ddpm, _ddpm_images),
    "flux": (_flux, _flux_images),
    "qwen_image": (_qwen_image, _qwen_image_images),
}


def _names(table):
    """The entries, the known failure marked: a strict xfail, so the fix turns it into a failure
    that asks for the mark to go."""
    return [pytest.param(name, marks=pytest.mark.xfail(reason=KNOWN_CHANNELS_LAST, strict=True))
            if name == "ddpm" else name for name in table]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("name", _names(PIPELINES))
def test_pipeline_matches_cpu(name, dtype):
    build, images = PIPELINES[name]
    pipe = build(dtype)
    wider = copy.deepcopy(pipe).to(WIDER[dtype])
    on_neuron = copy.deepcopy(pipe)
    with torch.no_grad():
        cpu = images(pipe, "cpu", dtype)
        with noise_drawn_in(dtype):
            reference = images(wider, "cpu", WIDER[dtype])
        torch_neuronx.clear_op_tracking()
        neuron = images(on_neuron, "neuron", dtype)
        fallbacks = torch_neuronx.get_fallback_ops()
    assert neuron.device.type == "neuron" and neuron.shape == cpu.shape and neuron.shape[1] == 3
    assert cpu.abs().sum() > 0  # an image, not zeros
    result = agreement(neuron, cpu, reference, dtype)
    RESULTS[f"{name} pipeline {str(dtype).removeprefix('torch.')}"] = result
    assert result.ok, f"{name} pipeline in {dtype}: {result}"
    assert fallbacks == [], f"ops that fell back to the CPU: {fallbacks}"
