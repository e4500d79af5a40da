"""Diffusers on neuron: tiny random FLUX and Qwen-Image transformers in their text-to-image
pipelines (prompt embeddings given directly, so no text encoder or tokenizer is needed offline)
produce the CPU's images, with no op falling back to the CPU."""

import pytest
import torch

import torch_neuronx

diffusers = pytest.importorskip("diffusers")


def _flux_pipeline():
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
    )


def _flux_images(device):
    pipe = _flux_pipeline().to(device)
    g = torch.Generator().manual_seed(0)
    prompt_embeds, pooled = torch.randn(1, 8, 32, generator=g), torch.randn(1, 32, generator=g)
    out = pipe(
        prompt_embeds=prompt_embeds.to(device), pooled_prompt_embeds=pooled.to(device), height=16,
        width=16, num_inference_steps=2, guidance_scale=5.0, output_type="pt",
        generator=torch.Generator().manual_seed(0),
    )
    return out.images.cpu()


def _qwen_image_pipeline():
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
    )


def _qwen_image_images(device):
    pipe = _qwen_image_pipeline().to(device)
    g = torch.Generator().manual_seed(0)
    embeds, mask = torch.randn(1, 8, 16, generator=g), torch.ones(1, 8, dtype=torch.long)
    out = pipe(
        prompt_embeds=embeds.to(device), prompt_embeds_mask=mask.to(device), height=32, width=32,
        num_inference_steps=2, true_cfg_scale=1.0, output_type="pt",
        generator=torch.Generator().manual_seed(0),
    )
    return out.images.cpu()


@pytest.mark.parametrize("images", [_flux_images, _qwen_image_images], ids=["flux", "qwen_image"])
def test_text_to_image_pipeline_matches_cpu(images):
    torch_neuronx.clear_op_tracking()
    on_neuron = images("neuron")
    fallbacks = torch_neuronx.get_fallback_ops()
    on_cpu = images("cpu")
    assert on_neuron.shape == on_cpu.shape and on_neuron.shape[1] == 3
    assert on_neuron.abs().sum() > 0  # an image, not zeros
    torch.testing.assert_close(on_neuron, on_cpu, rtol=1e-4, atol=1e-5)
    assert fallbacks == [], f"ops that fell back to the CPU: {fallbacks}"
