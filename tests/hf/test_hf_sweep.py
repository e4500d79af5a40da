"""A fixed subset of the Hugging Face architecture sweep (`python -m torch_neuronx.hf_sweep`):
each architecture, built tiny from its own config class, must match CPU on loss, logits, gradient
norms and greedy tokens, with no CPU-fallback op."""

import pytest

pytest.importorskip("transformers")

from torch_neuronx import hf_sweep  # noqa: E402

import torch  # noqa: E402

# Decoders of the main families; gpt2 and gemma tie their embeddings and lm_head, which must stay
# tied through Module.to("neuron"); qwen3_moe routes tokens with histc on integer expert ids.
SUBSET = ["llama", "qwen3", "mistral", "qwen2", "phi3", "gpt2", "gemma", "qwen3_moe"]


@pytest.mark.parametrize("model_type", SUBSET)
def test_architecture_matches_cpu(model_type):
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    rec = hf_sweep.sweep_one(model_type, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type], torch.float32, 120)
    assert rec["status"] == "pass", rec
    assert rec["fallback_ops"] == [], rec["fallback_ops"]
    assert len(rec["tokens"]) == hf_sweep.NEW_TOKENS


def test_non_decoders_are_skipped_with_a_reason():
    rec = hf_sweep.sweep_one("bart", "BartForCausalLM", torch.float32, 60)
    assert rec["status"] == "skipped" and "encoder-decoder" in rec["reason"]
