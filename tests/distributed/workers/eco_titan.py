"""torchtitan's Llama 3 debug model trained on neuron with its own Trainer, under torchrun.

    eco_titan.py DIR [--tp N]

torchtitan's debug recipe (llama3_debugmodel: its model, AdamW, warmup + linear decay, selective
activation checkpointing, chunked cross-entropy) with the parallelism the launch asks for: FSDP2
over WORLD/TP ranks and TP over N. What changes from the recipe, and why:
- data: torchtitan's test corpus and tokenizer live in its git tree, not in the wheel; we register
  the shipped corpus (examples/data/tiny_facts.txt) as a dataset and a word-level tokenizer built
  from it (nothing is downloaded);
- size: seq_len 64, 2 sequences per replica, 4 steps, no checkpoint or validation (CI time);
- float32 training (torchtitan's default for FSDP2 is bf16 parameters in compute), so that the
  run compares closely with a single-process one;
- the initial weights come from one seed checkpoint written by a single process, as torchtitan's
  own loss-comparison tooling does, because a sharded init draws its random numbers per shard.

Rank 0 writes the per-step losses to DIR/losses-<world>.json.
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def assets(directory: Path) -> Path:
    """The tokenizer (tokenizer.json + tokenizer_config.json) torchtitan reads from hf_assets_path."""
    path = directory / "tokenizer"
    if not (path / "tokenizer.json").exists():
        sys.path.insert(0, str(EXAMPLES))
        from sft_lora import build_tokenizer

        lines = (EXAMPLES / "data" / "tiny_facts.txt").read_text().splitlines()
        build_tokenizer(lines).save_pretrained(str(path))
    return path


def register_corpus(tp: int):
    from datasets import Dataset
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets.text_datasets import DATASETS

    lines = (EXAMPLES / "data" / "tiny_facts.txt").read_text().splitlines()
    # torchtitan gives each data-parallel replica a contiguous 1/dp of the rows: with the corpus
    # repeated dp times every replica reads the whole corpus in order, so the replicas' averaged
    # gradient is that of one process reading it once (what the single-process run does).
    dp = int(os.environ.get("WORLD_SIZE", "1")) // tp
    DATASETS["tiny_facts"] = DatasetConfig(
        path=str(EXAMPLES / "data" / "tiny_facts.txt"),
        loader=lambda path: Dataset.from_dict({"text": lines * dp}),
        sample_processor=lambda sample: sample["text"],
    )


def dense_flex_attention():
    """torchtitan 0.3.0's language models attend only through FlexAttention (its SDPA path was
    removed; varlen is CUDA FlashAttention), wrapped in torch.compile with Inductor's default
    backend. PyTorch's flex_attention runs only on CUDA, CPU, HPU and MPS and has no backward on
    CPU, so it cannot train on neuron (nor on CPU). This replaces the two compiled functions with
    the same attention computed densely: create_block_mask stays (eager), and the attention
    materialises the block mask's mask_mod as a boolean mask for SDPA. For torchtitan's masks
    (causal, document-causal) and no score_mod this is the same operator; at this model's sizes
    the dense mask costs nothing."""
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import AuxOutput, create_block_mask, create_mask
    from torchtitan.models.common import attention

    def flex_as_sdpa(q, k, v, *, score_mod, block_mask, scale, enable_gqa, return_aux, kernel_options):
        if score_mod is not None:
            raise NotImplementedError("dense flex attention: score_mod is not supported")
        b, _, q_len, _ = q.shape
        mask = create_mask(block_mask.mask_mod, b, 1, q_len, k.shape[-2], device=q.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
        lse = None
        if return_aux is not None and return_aux.lse:
            kk = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1) if enable_gqa else k
            scores = (q @ kk.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
            lse = scores.masked_fill(~mask, float("-inf")).logsumexp(-1)
        return out, AuxOutput(lse=lse)

    attention._compiled_create_block_mask = create_block_mask
    attention.FlexAttention._compiled_flex_attn = flex_as_sdpa


def torch_2_13_compat():
    """torchtitan 0.3.0 is built against a PyTorch nightly newer than 2.13: after the first step
    it shortens the process groups' timeouts with torch.distributed.set_timeout, which 2.13 has
    under its older private name, _set_pg_timeout (same arguments, same effect)."""
    import torch.distributed as dist

    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = dist.distributed_c10d._set_pg_timeout


def config(directory: Path, tp: int, seed_checkpoint: bool):
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    cfg = llama3_debugmodel()
    cfg.hf_assets_path = str(assets(directory))
    cfg.dataloader.dataset = "tiny_facts"
    cfg.training.seq_len = 64
    cfg.training.local_batch_size = 2
    cfg.training.steps = 4
    cfg.training.mixed_precision_param = "float32"
    cfg.parallelism.tensor_parallel_degree = tp
    # DTensor on the TP axis and FSDP2 on the data-parallel mesh (torchtitan's long-standing
    # path). Its default, "spmd_types", asks FSDP2 for parameters that are DTensors on the whole
    # 2-D mesh, which torch 2.13's fully_shard rejects for the plain (norm) weights.
    cfg.parallelism.spmd_backend = "partial_dtensor"
    cfg.parallelism.data_parallel_shard_degree = -1  # the rest of the ranks
    cfg.validator.enable = False
    cfg.debug.seed = 0
    # (not debug.deterministic: it re-wraps flex_attention in torch.compile)
    cfg.checkpoint.enable = True
    cfg.checkpoint.create_seed_checkpoint = seed_checkpoint
    cfg.checkpoint.last_save_model_only = True
    if seed_checkpoint:
        cfg.dump_folder = str(directory / "seed")
    else:
        # A fresh folder per layout: torchtitan resumes from whatever its checkpoint folder holds.
        cfg.dump_folder = str(directory / f"run-{os.environ.get('WORLD_SIZE', '1')}")
        cfg.checkpoint.initial_load_path = str(directory / "seed" / "checkpoint" / "step-0")
        cfg.checkpoint.interval = 10**6  # (it still saves the model after the last step)
    return cfg


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--seed-checkpoint", action="store_true")
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))

    from torchtitan.tools.logging import init_logger

    init_logger()
    register_corpus(args.tp)
    dense_flex_attention()
    torch_2_13_compat()
    cfg = config(args.directory, args.tp, args.seed_checkpoint)
    trainer = cfg.build()
    if args.seed_checkpoint:
        trainer.checkpointer.save(curr_step=0, last_step=True)
        trainer.close()
        print("seed checkpoint written", flush=True)
        return
    assert trainer.device.type == "neuron", trainer.device
    losses = []
    record = trainer.metrics_processor.log

    def log(step, global_avg_loss, *a, **k):
        losses.append(float(global_avg_loss))
        return record(step, global_avg_loss, *a, **k)

    trainer.metrics_processor.log = log
    trainer.train()
    trainer.close()
    if int(os.environ.get("RANK", "0")) == 0:
        (args.directory / f"losses-{world}.json").write_text(json.dumps(losses))
        print(f"torchtitan {world} ranks TP={args.tp}: losses {losses}", flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
