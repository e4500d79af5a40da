"""Fine-tune a tiny Llama with tensor parallelism inside each replica and FSDP2 across replicas,
the layout of Hugging Face's Trainium example (32 processes on one trn1.32xlarge: TP=4 x FSDP=8),
on the simulated instance. Ends with a plain transformers checkpoint that loads on CPU.

    # the full layout: 32 ranks, one per NeuronCore of the trn1.32xlarge preset
    NRTSIM_INSTANCE=trn1.32xlarge torchrun --nproc-per-node 32 \\
        examples/distributed/finetune_tp_fsdp.py --tp 4 --out /tmp/tiny-llama-tp-fsdp
    # the CI version: 4 ranks, TP=2 x FSDP=2
    torchrun --nproc-per-node 4 examples/distributed/finetune_tp_fsdp.py --tp 2

Each process sees only its own core (torchrun's LOCAL_RANK -> NEURON_RT_VISIBLE_CORES), so the
model lives on "neuron" (neuron:0 of the process). `make finetune-32` runs the full layout.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_config(tp: int) -> LlamaConfig:
    # Heads and KV heads divisible by the TP degree: each rank holds whole heads.
    return LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2 * tp, num_key_value_heads=tp, max_position_embeddings=64,
        tie_word_embeddings=False,
    )


def parallelize(model: LlamaForCausalLM, mesh, bf16: bool) -> LlamaForCausalLM:
    plan = {
        "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(),
    }
    for layer in model.model.layers:
        parallelize_module(layer, mesh["tp"], plan)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"], **({"mp_policy": mp} if mp else {}))
    fully_shard(model, mesh=mesh["dp"], **({"mp_policy": mp} if mp else {}))
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-per-replica", type=int, default=2)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--bf16", action="store_true", help="FSDP2 MixedPrecisionPolicy in bf16")
    parser.add_argument("--out", default=None, help="where rank 0 saves the transformers checkpoint")
    args = parser.parse_args()

    start = time.perf_counter()
    dist.init_process_group("neuron", device_id=torch.device("neuron", 0))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % args.tp:
        raise SystemExit(f"world size {world} is not a multiple of --tp {args.tp}")
    mesh = init_device_mesh("neuron", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
    dp_rank, dp_size = mesh["dp"].get_local_rank(), mesh["dp"].size()

    config = tiny_config(args.tp)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = parallelize(LlamaForCausalLM(config).to("neuron"), mesh, args.bf16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    for step in range(args.steps):
        # A synthetic corpus of one global batch, seen every step (so the loss must fall):
        # replica `dp_rank` takes its own rows; the TP ranks of one replica share them.
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, config.vocab_size, (dp_size * args.batch_per_replica, args.seq), generator=g)
        mine = tokens[dp_rank * args.batch_per_replica : (dp_rank + 1) * args.batch_per_replica].to("neuron")
        loss = model(input_ids=mine, labels=mine).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        reported = loss.detach().float()
        dist.all_reduce(reported, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step}: loss {reported.item():.4f}", flush=True)

    # Gather the full, unsharded weights (collective), and let rank 0 write a plain checkpoint.
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak = torch.tensor([peak_rss_mib], device="neuron")
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        out = args.out or os.path.join(os.getcwd(), "tiny-llama-tp-fsdp")
        plain = LlamaForCausalLM(config)
        plain.load_state_dict({k: v.float() for k, v in state.items()})
        plain.save_pretrained(out)
        reloaded = LlamaForCausalLM.from_pretrained(out)  # on CPU, no torch.distributed
        probe = torch.randint(0, config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(99))
        assert torch.equal(reloaded(probe).logits, plain(probe).logits)
        print(f"saved {out}; reloaded on CPU; {world} ranks (TP={args.tp} x FSDP={world // args.tp}) "
              f"in {time.perf_counter() - start:.1f} s; peak RSS per rank {peak.item():.0f} MiB", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
