"""Supervised fine-tuning with TRL's SFTTrainer and a PEFT LoRA adapter, in bfloat16 on `neuron`.

This is the standard TRL + PEFT script. Nothing in it names the device: `import torch` autoloads
the backend, and Trainer/Accelerate pick `neuron` through their own device detection. The only
TorchNeuron-specific lines are the static-shape adjustments, marked `# static shapes`:
every batch is padded to one fixed length, the last partial batch is dropped, and dynamo's
automatic dynamic shapes are off (they matter once the model is compiled).

Everything is local, no Hub: a tiny Llama built from its config, a word-level tokenizer trained
with `tokenizers` on the shipped corpus (examples/data/tiny_facts.txt, CC0), and the result is a
normal Transformers + PEFT checkpoint (safetensors) that plain transformers + peft load on CPU:

    <output_dir>/base      the base model and tokenizer (model.safetensors)
    <output_dir>/adapter   the LoRA adapter (adapter_model.safetensors, adapter_config.json)

    .venv/bin/python examples/sft_lora.py                    # about a minute
    .venv/bin/python examples/sft_lora.py --max-steps 8      # a quick check
"""

import argparse
import os
from pathlib import Path

import torch
from datasets import Dataset
from peft import LoraConfig
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)
from trl import SFTConfig, SFTTrainer

DATA = Path(__file__).parent / "data" / "tiny_facts.txt"
SEQ_LEN = 24  # the longest line is 11 words (+ bos/eos); every batch is padded to exactly this


def build_tokenizer(lines: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer trained on the corpus; bos/eos added by the post-processor."""
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(
        lines, trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<s>", "</s>"])
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
    )


def build_model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        # A random base with the default 0.02 init predicts a near-uniform distribution that a
        # low-rank adapter barely moves; a wider init gives LoRA something to steer.
        initializer_range=0.2,
    )
    # Built in bfloat16 rather than built in float32 and cast with .to(bfloat16): a cast also
    # rounds the rotary embedding's float32 frequencies (a non-persistent buffer, never saved),
    # so the trained model would run on bf16-rounded frequencies (up to 2e-4 off) while every
    # reload of the checkpoint recomputes them in float32 -- different logits from the same files.
    return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="runs/sft_lora")
    parser.add_argument("--max-steps", type=int, default=120)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--use-cpu", action="store_true", help="train on CPU, for comparison")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)

    torch._dynamo.config.automatic_dynamic_shapes = False  # static shapes

    lines = [line for line in DATA.read_text().splitlines() if line.strip()]
    tokenizer = build_tokenizer(lines)
    model = build_model(tokenizer)
    dataset = Dataset.from_dict({"text": lines})

    out = Path(args.output_dir)
    # The base model has random weights, so it is saved beside the adapter: a checkpoint anyone
    # can load with plain transformers + peft.
    model.save_pretrained(out / "base")
    tokenizer.save_pretrained(out / "base")
    model.name_or_path = str((out / "base").resolve())

    config = SFTConfig(
        output_dir=str(out / "trainer"),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        bf16=True,
        logging_steps=max(1, args.max_steps // 10),
        save_strategy="no",
        report_to=[],
        seed=0,
        disable_tqdm=args.no_progress,
        use_cpu=args.use_cpu,
        max_length=SEQ_LEN,
        pad_to_multiple_of=SEQ_LEN,  # static shapes: every batch is [batch, SEQ_LEN]
        packing=False,
        padding_free=False,  # static shapes: padding-free flattens to data-dependent lengths
        dataloader_drop_last=True,  # static shapes: no smaller last batch
    )
    peft_config = LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,
        target_modules=[
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"
        ],
        task_type="CAUSAL_LM",
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    print(f"training on {trainer.args.device} (accelerator: {trainer.accelerator.device})")
    result = trainer.train()
    trainer.save_model(str(out / "adapter"))

    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    print(f"loss: first logged {losses[0]:.3f}, last logged {losses[-1]:.3f}")
    print(f"saved base model to {out / 'base'} and LoRA adapter to {out / 'adapter'}")
    return {
        "trainer": trainer,
        "losses": losses,
        "train_runtime": result.metrics["train_runtime"],
        "output_dir": out,
        "tokenizer": tokenizer,
    }


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
