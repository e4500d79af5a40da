"""A whole Diffusers text-to-image pipeline with tensor parallelism on neuron: FLUX.1's pipeline
(CLIP and T5 text encoders, the FLUX transformer, the VAE) where the transformer is loaded with
``parallel_config=TensorParallelConfig(tp_degree=4)``, so each of the 4 ranks reads and holds a
quarter of its attention and MLP weights, and runs its share of every layer; the text encoders
and the VAE run whole on every rank. Rank 0 saves the image.

    torchrun --nproc-per-node 4 examples/diffusers_tp.py --out image.png

Everything is built from code, tiny and randomly initialised (no Hugging Face Hub: the tokenizer
is a word-level vocabulary made here), so the image is noise shaped by untrained weights: the
point is the plumbing a real FLUX.1-dev run takes on a trn2 instance. With a checkpoint it is
the same code with ``from_pretrained("black-forest-labs/FLUX.1-dev", subfolder=...)``. The only
things that name the device are ``init_process_group("neuron")`` and ``.to("neuron")``; under
torchrun each process sees its own NeuronCore (docs/distributed.md).

--check reruns the pipeline in this process on the CPU, without tensor parallelism, and compares
the images (the bound is the one tests/distributed/workers/diffusers_tp.py derives, here with a
float64 run of the same CPU pipeline standing for the exact image).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import torch
import torch.distributed as dist

WORDS = "a an the photo picture painting of on in with cat dog tree house red blue green small big at night".split()


def tokenizer(max_length: int):
    """A word-level tokenizer made here (no download): the words above, then unknown."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                                   eos_token="</s>", model_max_length=max_length)


def components(text_len: int):
    """The pipeline's parts, seeded: the same weights on every rank."""
    import diffusers
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    vocab = len(WORDS) + 3
    torch.manual_seed(0)
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, max_position_embeddings=text_len, projection_dim=32,
                                        pad_token_id=0, bos_token_id=2, eos_token_id=2))
    t5 = T5EncoderModel(T5Config(vocab_size=vocab, d_model=24, d_kv=8, d_ff=48, num_layers=1, num_heads=2,
                                 pad_token_id=0, eos_token_id=2, decoder_start_token_id=0))
    transformer = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=4, joint_attention_dim=24, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8],
    )
    vae = diffusers.AutoencoderKL(
        sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1,
        latent_channels=1, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
        shift_factor=0.0609, scaling_factor=1.5035,
    )
    return dict(text_encoder=clip, tokenizer=tokenizer(text_len), text_encoder_2=t5, tokenizer_2=tokenizer(text_len),
                transformer=transformer, vae=vae, scheduler=diffusers.FlowMatchEulerDiscreteScheduler())


def initial_latents(pipe, args):
    """The starting noise, drawn once on the CPU in float32, so that every run (TP on neuron, one
    CPU process, its float64 twin) starts from the same numbers."""
    channels = pipe.transformer.config.in_channels // 4
    latents, _ = pipe.prepare_latents(1, channels, args.size, args.size, torch.float32, "cpu",
                                      torch.Generator().manual_seed(0))
    return latents


def run(pipe, args, latents):
    out = pipe(args.prompt, height=args.size, width=args.size, num_inference_steps=args.steps, guidance_scale=3.5,
               max_sequence_length=args.text_len, output_type="pt", latents=latents)
    return out.images.to(device="cpu", dtype=torch.float64)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="diffusers_tp.png", help="where rank 0 saves the image")
    p.add_argument("--prompt", default="a photo of a red cat on a tree at night")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--size", type=int, default=32, help="image height and width (pixels)")
    p.add_argument("--text-len", type=int, default=16, help="tokens per prompt for both encoders")
    p.add_argument("--check", action="store_true", help="compare with one CPU process without TP")
    args = p.parse_args(argv)

    import diffusers
    from diffusers import TensorParallelConfig

    dist.init_process_group("neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    parts = components(args.text_len)

    # The transformer as a checkpoint would come: saved once (by rank 0), then loaded on every
    # rank with a tensor-parallel config, each rank reading only its shards.
    shared = [tempfile.mkdtemp(prefix="diffusers_tp-") if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)
    path = os.path.join(shared[0], "transformer")
    if rank == 0:
        parts["transformer"].save_pretrained(path)
    dist.barrier()
    reference_transformer = parts["transformer"]
    parts["transformer"] = diffusers.FluxTransformer2DModel.from_pretrained(
        path, parallel_config=TensorParallelConfig(tp_degree=world))
    dist.barrier()  # every rank has read it
    if rank == 0:
        shutil.rmtree(shared[0])
    pipe = diffusers.FluxPipeline(**parts)
    pipe.set_progress_bar_config(disable=rank != 0)
    latents = initial_latents(pipe, args)
    image = run(pipe.to("neuron"), args, latents)

    if rank == 0:
        from PIL import Image

        pixels = (image[0].permute(1, 2, 0).clamp(0, 1) * 255).round().to(torch.uint8).numpy()
        Image.fromarray(pixels).save(args.out)
        print(f"saved {args.out} ({args.size}x{args.size}, {args.steps} steps, transformer over {world} ranks)",
              flush=True)
    if args.check and rank == 0:
        parts["transformer"] = reference_transformer
        parts["text_encoder"], parts["text_encoder_2"], parts["vae"] = (
            pipe.text_encoder.cpu(), pipe.text_encoder_2.cpu(), pipe.vae.cpu())
        cpu = run(diffusers.FluxPipeline(**parts), args, latents)
        wide = {k: v.to(torch.float64) if isinstance(v, torch.nn.Module) else v for k, v in parts.items()}
        wider = run(diffusers.FluxPipeline(**wide), args, latents.double())
        cpu_error = float((cpu - wider).abs().max())
        allowed = 3 * cpu_error + 2.0**-24 * float(wider.abs().max())
        diff = float((image - cpu).abs().max())
        print(f"check: max |TP on neuron - one CPU process| {diff:.3g} (allowed {allowed:.3g})", flush=True)
        if diff > allowed:
            raise SystemExit("the tensor-parallel image differs from one process's beyond the bound")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
