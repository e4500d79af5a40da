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

from diffusers_check import DTYPES, assert_neuron_matches_cpu, dtype_id
from diffusers_tiny import ddpm_unet

diffusers = pytest.importorskip("diffusers")

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


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", list(PIPELINES))
def test_pipeline_matches_cpu(name, dtype):
    build, images = PIPELINES[name]
    pipe = build(dtype)

    def run(device, run_dtype):
        return images(copy.deepcopy(pipe).to(run_dtype), device, run_dtype)

    assert_neuron_matches_cpu(run, dtype, f"{name} pipeline", RESULTS)
