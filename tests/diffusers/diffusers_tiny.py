"""Tiny Diffusers models built from code (no Hub), seeded, and an input for each.

Each entry makes the model in float32 on CPU and the arguments of one forward call; the tests
convert both to the dtype under test. Sizes are the smallest that keep every block of the
architecture in play (attention, up/down sampling, rotary embeddings, modulation)."""

from __future__ import annotations

import torch

diffusers = __import__("diffusers")


def _randn(generator, *shape):
    return torch.randn(*shape, generator=generator)


def ddpm_unet() -> torch.nn.Module:
    """DDPM's UNet2DModel with attention blocks: AttnDownBlock2D's attention processor hands
    back a residual with channels-last strides, the layout that exposed the binary-op bug."""
    torch.manual_seed(0)
    return diffusers.UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=(8, 16), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=4, attention_head_dim=8,
    )


def sd_unet():
    """An SD-style UNet2DConditionModel: cross-attention transformer blocks on text states."""
    torch.manual_seed(0)
    model = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=12,
        attention_head_dim=4, norm_num_groups=4,
    )
    g = torch.Generator().manual_seed(1)
    inputs = {"sample": _randn(g, 1, 4, 8, 8), "timestep": torch.tensor([17]),
              "encoder_hidden_states": _randn(g, 1, 5, 12)}
    return model, inputs


def vae():
    """AutoencoderKL, encode then decode (the posterior's mode: no sampling)."""
    torch.manual_seed(0)
    model = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, block_out_channels=(8, 16), layers_per_block=1,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), latent_channels=4,
        norm_num_groups=4, sample_size=16,
    )
    g = torch.Generator().manual_seed(1)
    return _EncodeDecode(model), {"sample": _randn(g, 1, 3, 16, 16)}


class _EncodeDecode(torch.nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, sample):
        latent = self.vae.encode(sample).latent_dist.mode()
        return self.vae.decode(latent).sample


def flux():
    """FluxTransformer2DModel: double- and single-stream blocks, 3-axis rotary embeddings."""
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=24, pooled_projection_dim=12,
        guidance_embeds=True, axes_dims_rope=[4, 4, 8],
    )
    g = torch.Generator().manual_seed(1)
    height, width, text = 4, 4, 5
    rows, columns = torch.meshgrid(torch.arange(float(height)), torch.arange(float(width)),
                                   indexing="ij")
    image_ids = torch.stack([torch.zeros_like(rows), rows, columns], dim=-1).reshape(-1, 3)
    inputs = {
        "hidden_states": _randn(g, 1, height * width, 8),
        "encoder_hidden_states": _randn(g, 1, text, 24),
        "pooled_projections": _randn(g, 1, 12),
        "timestep": torch.tensor([0.6]),
        "guidance": torch.tensor([3.5]),
        "img_ids": image_ids,
        "txt_ids": torch.zeros(text, 3),
    }
    return model, inputs


def qwen_image():
    """QwenImageTransformer2DModel: the MMDiT of Qwen-Image, complex rotary embeddings."""
    torch.manual_seed(0)
    model = diffusers.QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=12, guidance_embeds=False,
        axes_dims_rope=(8, 4, 4),
    )
    g = torch.Generator().manual_seed(1)
    height, width, text = 4, 4, 5
    inputs = {
        "hidden_states": _randn(g, 1, height * width, 16),
        "encoder_hidden_states": _randn(g, 1, text, 12),
        "encoder_hidden_states_mask": torch.ones(1, text, dtype=torch.long),
        "timestep": torch.tensor([0.6]),
        "img_shapes": [[(1, height, width)]],
    }
    return model, inputs


def qwen_image_21():
    """QwenImage21Transformer2DModel (Qwen-Image 2.1): text and image tokens interleaved in one
    sequence, block-causal attention, zero-centred RMS norms."""
    torch.manual_seed(0)
    model = diffusers.QwenImage21Transformer2DModel(
        patch_size=1, in_channels=8, out_channels=8, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, context_in_dim=12, axes_dims_rope=(4, 6, 6),
    )
    g = torch.Generator().manual_seed(1)
    height, width, text = 4, 4, 5
    slots = height * width // 4  # each image slot of the text sequence stands for 2x2 latents
    inputs = {
        "hidden_states": _randn(g, 1, height * width, 8),
        "encoder_hidden_states": _randn(g, 1, text, 12),
        "timestep": torch.tensor([0.6]),
        "img_shapes": [[(1, height, width)]],
        "img_mask": torch.tensor([[False] * text + [True] * slots]),
    }
    return model, inputs


def ddpm_model():
    """The DDPM UNet's forward on its own (the pipeline test runs it in the sampling loop)."""
    g = torch.Generator().manual_seed(1)
    return ddpm_unet(), {"sample": _randn(g, 1, 3, 8, 8), "timestep": torch.tensor([17])}


MODELS = {
    "ddpm_unet": ddpm_model,
    "sd_unet": sd_unet,
    "vae": vae,
    "flux": flux,
    "qwen_image": qwen_image,
    "qwen_image_21": qwen_image_21,
}
