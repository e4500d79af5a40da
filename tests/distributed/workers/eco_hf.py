"""Hugging Face libraries over the neuron process group, run under torchrun (each process sees its
own NeuronCore as neuron:0).

argv[1]:
  accelerate-tp DIR   Accelerate's PartialState/Accelerator detect MULTI_NEURON and their
                      collectives give known answers; transformers loads a checkpoint with tensor
                      parallelism (DistributedConfig(tp_size=world)) and its logits match the same
                      checkpoint on CPU in one process.
  sft DIR             TRL SFTTrainer with FSDP2 trains a tiny Llama; rank 0 writes the losses and
                      saves the model under DIR (the test compares them with `sft-reference`).
  sft-reference DIR   the same SFTTrainer run in one process on CPU, without torch.distributed.
  device-ids DIR      init_process_group(device_id=neuron:LOCAL_RANK), barrier(device_ids=
                      [LOCAL_RANK]), set_device_index(LOCAL_RANK) and Accelerate's DDP
                      (device_ids=[LOCAL_RANK]), with one visible core per process.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Transformers' threaded weight loading would issue device copies from worker threads; TorchNeuron's
# Hugging Face recipes turn it off and so do we (hf_ecosystem.md §2.5).
os.environ.setdefault("HF_DEACTIVATE_ASYNC_LOAD", "1")

import torch  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def tiny_llama_config(vocab_size=256):
    from transformers import LlamaConfig

    # Heads and KV heads divisible by 2 and 4: whole heads per rank at TP=2 or 4.
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )


# --- Accelerate and transformers' tensor-parallel loading ----------------------------------------


def accelerate_and_tp(directory):
    import torch.distributed as dist
    from accelerate import Accelerator, PartialState
    from accelerate.utils import DistributedType, broadcast_object_list, gather_object
    from transformers import LlamaForCausalLM
    from transformers.distributed import DistributedConfig

    state = PartialState()
    rank, world = state.process_index, state.num_processes
    assert state.distributed_type == DistributedType.MULTI_NEURON, state.distributed_type
    assert state.backend == "neuron" and dist.get_backend() == "neuron", (state.backend, dist.get_backend())
    assert world == int(os.environ["WORLD_SIZE"]) and rank == int(os.environ["RANK"])
    assert state.device == torch.device("neuron", torch.neuron.current_device()), state.device

    accelerator = Accelerator()
    assert accelerator.distributed_type == DistributedType.MULTI_NEURON
    mine = torch.arange(3, dtype=torch.float32, device=accelerator.device) + 10 * rank
    gathered = accelerator.gather(mine).cpu()
    assert torch.equal(gathered, torch.cat([torch.arange(3.0) + 10 * r for r in range(world)])), gathered
    total = accelerator.reduce(mine, reduction="sum").cpu()
    assert torch.equal(total, torch.arange(3.0) * world + 10 * sum(range(world))), total
    # Ragged tensors: padded to the longest across processes before a gather.
    ragged = torch.full((rank + 1,), float(rank + 1), device=accelerator.device)
    padded = accelerator.pad_across_processes(ragged, pad_index=-1)
    assert padded.shape == (world,) and padded.cpu()[rank + 1 :].eq(-1).all(), padded
    # Object collectives (Accelerate's neuron paths pad the pickled bytes to a power of two).
    objects = broadcast_object_list([{"from": rank, "text": "x" * (100 + rank)}] if rank == 0 else [None])
    assert objects[0] == {"from": 0, "text": "x" * 100}, objects
    assert gather_object([f"rank{rank}"]) == [f"rank{r}" for r in range(world)]

    # Tensor-parallel loading: every rank reads the checkpoint and keeps its own slice.
    path = os.path.join(directory, "tiny-llama")
    if rank == 0:
        torch.manual_seed(0)
        LlamaForCausalLM(tiny_llama_config()).save_pretrained(path)
    accelerator.wait_for_everyone()
    model = LlamaForCausalLM.from_pretrained(path, distributed_config=DistributedConfig(tp_size=world), dtype=torch.float32)
    q = model.model.layers[0].self_attn.q_proj.weight
    assert q.device == torch.device("neuron", torch.neuron.current_device()), q.device
    local = q.to_local() if hasattr(q, "to_local") else q
    assert local.shape == (32 // world, 32), f"q_proj is not split over {world} ranks: local shape {tuple(local.shape)}"
    cpu = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)  # one process, CPU
    tokens = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        got = model(tokens.to(accelerator.device)).logits
        want = cpu(tokens).logits
    got = (got.full_tensor() if hasattr(got, "full_tensor") else got).cpu()
    # fp32; the TP run sums the row-parallel matmuls' partial products across ranks: a few
    # roundings (~1e-7 relative) per op through 2 layers on logits of O(0.1-1).
    diff = (got - want).abs().max().item()
    assert diff <= 1e-5, f"TP logits differ from CPU by {diff}"
    print(f"rank {rank} accelerate MULTI_NEURON ok; transformers TP={world} loading ok (logit diff {diff:.1e})", flush=True)
    accelerator.end_training()


# --- TRL SFTTrainer with FSDP2 ---------------------------------------------------------------------

SFT_STEPS, SFT_GLOBAL_BATCH, SFT_SEQ = 4, 4, 16


def sft(directory, reference):
    from datasets import Dataset
    from transformers import LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    sys.path.insert(0, str(EXAMPLES))
    from sft_lora import build_tokenizer  # the word-level tokenizer of the shipped corpus

    lines = (EXAMPLES / "data" / "tiny_facts.txt").read_text().splitlines()
    tokenizer = build_tokenizer(lines)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama_config(vocab_size=len(tokenizer)))
    dataset = Dataset.from_dict({"text": lines[: SFT_STEPS * SFT_GLOBAL_BATCH]})
    args = dict(
        output_dir=os.path.join(directory, "reference" if reference else "fsdp2"),
        max_steps=SFT_STEPS,
        per_device_train_batch_size=SFT_GLOBAL_BATCH // world,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        warmup_steps=0,
        # Static shapes: every batch padded to one length, no packing / padding-free.
        max_length=SFT_SEQ,
        pad_to_multiple_of=SFT_SEQ,
        packing=False,
        dataloader_drop_last=True,
        # The same batches in one process and in two: the dataset in order, no shuffling.
        train_sampling_strategy="sequential",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        dataloader_pin_memory=False,
        use_cpu=reference,
        # fp32 on both sides, so that they differ only by summation order (SFTConfig's default is
        # bf16, which FSDP2 turns into a bf16 MixedPrecisionPolicy and the CPU run into autocast).
        bf16=False,
    )
    if not reference:
        args.update(
            fsdp="full_shard",
            fsdp_config={"fsdp_version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"], "reshard_after_forward": True},
        )
    trainer = SFTTrainer(model=model, args=SFTConfig(**args), train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    state = PartialState()
    if not reference:
        assert trainer.accelerator.distributed_type == DistributedType.FSDP, trainer.accelerator.distributed_type
        assert trainer.accelerator.is_fsdp2
        assert next(trainer.model.parameters()).device.type == "neuron"
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    trainer.save_model(os.path.join(directory, "reference-model" if reference else "fsdp2-model"))
    if state.is_main_process:
        name = "reference.json" if reference else "fsdp2.json"
        Path(directory, name).write_text(
            json.dumps({"losses": losses, "distributed_type": str(trainer.accelerator.distributed_type), "world": world})
        )
        print(f"sft {'reference' if reference else 'FSDP2'} done: losses {losses}", flush=True)


def device_ids_of_the_local_rank():
    """What Accelerate and transformers call with the local rank, with one visible core per
    process (torchrun's default): neuron:LOCAL_RANK names the process's one core, neuron:0."""
    import torch.distributed as dist
    from accelerate import Accelerator

    local_rank = int(os.environ["LOCAL_RANK"])
    assert torch.neuron.device_count() == 1, torch.neuron.device_count()
    dist.init_process_group("neuron", device_id=torch.device("neuron", local_rank))
    dist.barrier(device_ids=[local_rank])  # accelerate's PartialState.wait_for_everyone
    torch.accelerator.set_device_index(local_rank)  # transformers' _bind_local_device
    accelerator = Accelerator()
    accelerator.wait_for_everyone()
    # Accelerator.prepare wraps the model in DDP(device_ids=[local_process_index]).
    model = torch.nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    model = accelerator.prepare(model)
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel), type(model)
    x = torch.full((2, 4), float(local_rank), device=torch.device("neuron", local_rank))
    accelerator.backward(model(x).sum())
    world = accelerator.num_processes
    # d/dw of sum(x @ w.T) is the column sums of x, 2 * rank each, averaged over the ranks by DDP.
    want = torch.full((1, 4), 2.0 * sum(range(world)) / world)
    assert torch.equal(model.module.weight.grad.cpu(), want), model.module.weight.grad
    print(f"rank {local_rank} device ids ok", flush=True)
    dist.destroy_process_group()


def bind_local_core():
    """With every core visible (TORCH_NEURONX_KEEP_VISIBLE_CORES=1), take the local rank's core,
    as a CUDA script takes its GPU (the SFT test runs in that layout; see test_ecosystem.py)."""
    if os.environ.get("TORCH_NEURONX_KEEP_VISIBLE_CORES") and "LOCAL_RANK" in os.environ:
        torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))


def main():
    scenario, directory = sys.argv[1], sys.argv[2]
    if scenario != "sft-reference":
        bind_local_core()
    if scenario == "accelerate-tp":
        accelerate_and_tp(directory)
    elif scenario == "sft":
        sft(directory, reference=False)
    elif scenario == "sft-reference":
        sft(directory, reference=True)
    elif scenario == "device-ids":
        device_ids_of_the_local_rank()
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()
