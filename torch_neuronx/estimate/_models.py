"""Model configurations the estimate knows by name, and loading any transformers config.

The presets are the published architectures' shapes (from each model's config.json on the
Hugging Face Hub), written out so that nothing is downloaded: a projection needs shapes, not
weights.
"""

from __future__ import annotations

import json
import os

# model_type plus the config.json fields that set the shapes.
PRESETS: dict[str, dict] = {
    "llama-2-7b": dict(
        model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
        max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=False,
    ),
    "llama-3.1-8b": dict(
        model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=False,
    ),
    "llama-3.1-70b": dict(
        model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
        num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=False,
    ),
    "llama-3.1-405b": dict(
        model_type="llama", hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
        num_attention_heads=128, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=False,
    ),
    "qwen3-30b-a3b": dict(
        model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, vocab_size=151936, max_position_embeddings=40960,
        tie_word_embeddings=False,
    ),
    "qwen3-235b-a22b": dict(
        model_type="qwen3_moe", hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
        num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, vocab_size=151936, max_position_embeddings=40960,
        tie_word_embeddings=False,
    ),
    "llama-2-13b": dict(
        model_type="llama", hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
        num_attention_heads=40, num_key_value_heads=40, vocab_size=32000,
        max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=False,
    ),
    "llama-2-70b": dict(
        model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
        num_attention_heads=64, num_key_value_heads=8, vocab_size=32000,
        max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=False,
    ),
    "llama-3-8b": dict(
        model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False,
    ),
    "llama-3.2-1b": dict(
        model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
        max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True,
    ),
    "mistral-7b": dict(
        model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
        max_position_embeddings=32768, rope_theta=1000000.0, sliding_window=None,
        tie_word_embeddings=False,
    ),
    # GPT-3 175B (Brown et al. 2020, table 2.1: 96 layers, d_model 12288, 96 heads) in the GPT-NeoX
    # architecture (Megatron's GPT: LayerNorm, GeLU MLP of 4 d_model, sequential residual), for
    # which transformers ships a tensor-parallel plan (GPT-2's architecture has none).
    "gpt3-175b": dict(
        model_type="gpt_neox", hidden_size=12288, intermediate_size=49152, num_hidden_layers=96,
        num_attention_heads=96, vocab_size=50304, max_position_embeddings=2048,
        use_parallel_residual=False, rotary_pct=1.0, tie_word_embeddings=False,
    ),
    "bert-large": dict(
        model_type="bert", hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
        num_attention_heads=16, vocab_size=30522, max_position_embeddings=512, is_decoder=True,
    ),
    # A small model for quick runs and tests.
    "tiny-llama": dict(
        model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
        max_position_embeddings=2048, tie_word_embeddings=False,
    ),
}
# The same architecture under its other published names.
PRESETS["llama-3.3-70b"] = PRESETS["llama-3.1-70b"]
PRESETS["llama-3-70b"] = dict(PRESETS["llama-3.1-70b"], max_position_embeddings=8192)


def load_config(model):
    """A transformers config from a preset name, a config.json path or directory, a dict, or a
    config object."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(model, PretrainedConfig):
        return model
    if isinstance(model, dict):
        fields = dict(model)
    elif isinstance(model, str) and model.lower() in PRESETS:
        fields = dict(PRESETS[model.lower()])
    elif isinstance(model, str) and os.path.exists(model):
        path = os.path.join(model, "config.json") if os.path.isdir(model) else model
        with open(path) as f:
            fields = json.load(f)
    else:
        raise ValueError(
            f"unknown model {model!r}: pass one of {sorted(PRESETS)}, a path to a config.json "
            "(or a directory holding one), a dict of config fields, or a transformers config"
        )
    if "model_type" not in fields:
        raise ValueError(f"the config {model!r} has no 'model_type'; add it (e.g. \"llama\")")
    model_type = fields.pop("model_type")
    return AutoConfig.for_model(model_type, **fields)
