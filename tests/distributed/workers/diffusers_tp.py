"""Diffusers transformers with tensor parallelism on 4 neuron ranks (under torchrun), against one
CPU process: FLUX.1 (FluxTransformer2DModel), FLUX.2 (Flux2Transformer2DModel), Qwen-Image
(QwenImageTransformer2DModel) and Qwen-Image 2.1 (QwenImage21Transformer2DModel), tiny configs
built from code (no Hub), each with heads and MLP widths that divide by the TP degree.

Each model is saved once (rank 0), then loaded on every rank with
``from_pretrained(..., parallel_config=TensorParallelConfig(tp_degree=4))`` (each rank reads only
its shards) or made with ``enable_parallelism(config=...)`` on an in-memory model, in float32 and
bfloat16; one forward on the same inputs on every rank is compared with the same model in one CPU
process.

How close is close enough follows from the arithmetic. The CPU result in dtype d is the exact
value plus d's rounding error along the model; the same model in the next wider dtype (float64 for
float32, float32 for bfloat16) stands for the exact value, its own error smaller by the ratio of
the unit roundoffs. Tensor parallelism computes the same function with other roundings: a rowwise
layer sums its contraction in TP partial sums (another summation order, which the rounding error
bound of a K-term sum covers whatever the order) and, in bfloat16, rounds each partial once before
the all-reduce rounds their sum: at most one more rounding per such layer than the single process
makes, so its error is at most twice the CPU's. Hence

    |tp - cpu| <= |tp - exact| + |cpu - exact| <= 3 x max|cpu - wider| + u x max|wider|

(u: one rounding of the result, 2^-24 float32, 2^-8 bfloat16). A wrong shard, gather or reduction
moves values by their own size, orders of magnitude beyond.

argv: <work dir> [model ...]; prints one line per check: "<model> <dtype> <how> diff ... allowed ..."."""

import copy
import os
import sys

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
TP = WORLD
WIDER = {torch.float32: torch.float64, torch.bfloat16: torch.float32}
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8}


def _randn(g, *shape):
    return torch.randn(*shape, generator=g)


def _image_ids(height, width, axes):
    rows, columns = torch.meshgrid(torch.arange(float(height)), torch.arange(float(width)), indexing="ij")
    parts = [torch.zeros_like(rows)] * (axes - 2) + [rows, columns]
    return torch.stack(parts, dim=-1).reshape(-1, axes)


def flux():
    import diffusers

    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=TP, joint_attention_dim=24, pooled_projection_dim=12, guidance_embeds=True,
        axes_dims_rope=[4, 4, 8],
    )
    g = torch.Generator().manual_seed(1)
    h = w = 4
    text = 5
    inputs = {"hidden_states": _randn(g, 1, h * w, 8), "encoder_hidden_states": _randn(g, 1, text, 24),
              "pooled_projections": _randn(g, 1, 12), "timestep": torch.tensor([0.6]),
              "guidance": torch.tensor([3.5]), "img_ids": _image_ids(h, w, 3), "txt_ids": torch.zeros(text, 3)}
    return model, inputs


def flux2():
    import diffusers

    torch.manual_seed(0)
    model = diffusers.Flux2Transformer2DModel(
        patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=TP, joint_attention_dim=24, timestep_guidance_channels=32, mlp_ratio=3.0,
        axes_dims_rope=(4, 4, 4, 4), guidance_embeds=True,
    )
    g = torch.Generator().manual_seed(1)
    h = w = 4
    text = 5
    inputs = {"hidden_states": _randn(g, 1, h * w, 8), "encoder_hidden_states": _randn(g, 1, text, 24),
              "timestep": torch.tensor([0.6]), "guidance": torch.tensor([3.5]), "img_ids": _image_ids(h, w, 4),
              "txt_ids": torch.zeros(text, 4)}
    return model, inputs


def qwen_image():
    import diffusers

    torch.manual_seed(0)
    model = diffusers.QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=TP, joint_attention_dim=12, guidance_embeds=False, axes_dims_rope=(8, 4, 4),
    )
    g = torch.Generator().manual_seed(1)
    h = w = 4
    text = 5
    inputs = {"hidden_states": _randn(g, 1, h * w, 16), "encoder_hidden_states": _randn(g, 1, text, 12),
              "encoder_hidden_states_mask": torch.ones(1, text, dtype=torch.long), "timestep": torch.tensor([0.6]),
              "img_shapes": [[(1, h, w)]]}
    return model, inputs


def qwen_image_21():
    import diffusers

    torch.manual_seed(0)
    model = diffusers.QwenImage21Transformer2DModel(
        patch_size=1, in_channels=8, out_channels=8, num_layers=2, attention_head_dim=16,
        num_attention_heads=TP, context_in_dim=12, axes_dims_rope=(4, 6, 6),
    )
    g = torch.Generator().manual_seed(1)
    h = w = 4
    text = 5
    slots = h * w // 4  # each image slot of the text sequence stands for 2x2 latents
    inputs = {"hidden_states": _randn(g, 1, h * w, 8), "encoder_hidden_states": _randn(g, 1, text, 12),
              "timestep": torch.tensor([0.6]), "img_shapes": [[(1, h, w)]],
              "img_mask": torch.tensor([[False] * text + [True] * slots])}
    return model, inputs


MODELS = {"flux": flux, "flux2": flux2, "qwen_image": qwen_image, "qwen_image_21": qwen_image_21}


def cast(inputs, dtype, device=None):
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            v = v.to(device) if device is not None else v
            v = v.to(dtype) if v.is_floating_point() else v
        out[k] = v
    return out


def sample(output):
    x = output.sample if hasattr(output, "sample") else output[0]
    if hasattr(x, "full_tensor"):
        x = x.full_tensor()
    return x.detach().cpu().double()


def check(name, model_fn, work, dtype, how):
    from diffusers import TensorParallelConfig

    model, inputs = model_fn()
    model.eval()
    with torch.no_grad():
        cpu = sample(copy.deepcopy(model).to(dtype)(**cast(inputs, dtype)))
        wider = sample(copy.deepcopy(model).to(WIDER[dtype])(**cast(inputs, WIDER[dtype])))
    config = TensorParallelConfig(tp_degree=TP)
    if how == "from_pretrained":
        path = os.path.join(work, name)
        if RANK == 0 and not os.path.exists(os.path.join(path, "config.json")):
            model.save_pretrained(path)
        dist.barrier()
        tp = type(model).from_pretrained(path, parallel_config=config, torch_dtype=dtype)
    else:
        tp = model.to(dtype)
        tp.enable_parallelism(config=config)
    tp = tp.to("neuron")
    # The planned weights are this rank's shards: a colwise projection holds 1/TP of its rows.
    sharded = [(n, p) for n, p in tp.named_parameters() if hasattr(p, "to_local")]
    assert sharded, f"{name}: no parameter is a DTensor shard"
    n, p = next((n, p) for n, p in sharded if p.placements[0].is_shard())
    assert p.to_local().shape[p.placements[0].dim] * TP == p.shape[p.placements[0].dim], (n, p.shape)
    with torch.no_grad():
        got = sample(tp(**cast(inputs, dtype, "neuron")))
    assert got.shape == cpu.shape, (got.shape, cpu.shape)
    cpu_error = float((cpu - wider).abs().max())
    scale = float(wider.abs().max())
    allowed = 3 * cpu_error + UNIT_ROUNDOFF[dtype] * scale
    diff = float((got - cpu).abs().max()) if torch.isfinite(got).all() else float("inf")
    line = (f"{name} {str(dtype).split('.')[-1]} {how}: diff {diff:.3g} allowed {allowed:.3g} "
            f"(cpu error {cpu_error:.3g}, scale {scale:.3g})")
    print(f"rank {RANK} {line}", flush=True)
    assert diff <= allowed, f"rank {RANK}: {line}"


def main():
    work = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    dist.init_process_group("neuron")
    for name in names:
        check(name, MODELS[name], work, torch.float32, "from_pretrained")
        check(name, MODELS[name], work, torch.bfloat16, "from_pretrained" if name != "flux" else "enable_parallelism")
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {RANK} diffusers tp ok", flush=True)


if __name__ == "__main__":
    main()
