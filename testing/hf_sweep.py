"""The Hugging Face architecture sweep: every causal-LM architecture of the installed transformers,
built tiny from its own config class with random weights, run on ``neuron`` and on CPU and
compared.

    python testing/hf_sweep.py [--only llama,gpt2] [--limit N] [--dtype float32|bfloat16]
                                     [--output-dir docs] [--time-limit 180]

For each entry of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``: forward with labels, backward, one AdamW
step, greedy ``generate`` of 8 new tokens with the KV cache, on both devices from the same
initial weights. Pass: loss, logits and gradient norms within tolerance of CPU, identical tokens.
Entries that are not text decoders are listed as skipped with the reason; a wrapper config whose
causal-LM class is the text decoder (llama4 -> Llama4ForCausalLM) is swept with its shrunk text
sub-config. Architectures that fail on CPU itself are reported as such (not a neuron failure).
``tiny_config`` derives the shrink from general rules (sizes that depend on each other, per-layer
patterns that keep every layer kind); the few unavoidable per-architecture values are in
``ARCH_OVERRIDES``, and the report names them. Writes ``hf_coverage.md`` and
``hf_coverage.json`` (``hf_coverage_bfloat16.*`` for ``--dtype bfloat16``) to the output
directory.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import signal
import statistics
import sys
import time
import traceback
import warnings

import torch

import torch_neuronx

NUM_LAYERS = 2
VOCAB = 512
BATCH, SEQ = 2, 8
NEW_TOKENS = 8

# Tolerances on (loss, logits, gradient norms): absolute + relative to the CPU value.
TOLERANCES = {
    torch.float32: dict(loss=1e-4, logits=1e-3, grad=1e-3),
    torch.bfloat16: dict(loss=2e-2, logits=1e-1, grad=5e-2),
}

# Common size attributes, set only where the default config has the attribute. Values keep the
# usual divisibility constraints (heads * head_dim == hidden, kv heads divide heads, ...).
SHRINK = {
    # width
    "hidden_size": 64, "n_embd": 64, "d_model": 64, "dim": 64, "embed_dim": 64, "n_embed": 64,
    "intermediate_size": 128, "ffn_dim": 128, "n_inner": 128, "d_ff": 128, "ffn_hidden_size": 128,
    "decoder_ffn_dim": 128, "encoder_ffn_dim": 128, "hidden_dim": 128,
    # depth
    "num_hidden_layers": NUM_LAYERS, "n_layer": NUM_LAYERS, "num_layers": NUM_LAYERS,
    "n_layers": NUM_LAYERS, "decoder_layers": NUM_LAYERS, "encoder_layers": NUM_LAYERS,
    # attention
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "decoder_attention_heads": 4, "encoder_attention_heads": 4,
    "num_key_value_heads": 2, "n_kv_heads": 2, "num_kv_heads": 2, "multi_query_group_num": 2,
    "head_dim": 16, "kv_channels": 16, "attention_head_dim": 16,
    "max_position_embeddings": 256, "n_positions": 256, "n_ctx": 256,
    "max_window_layers": NUM_LAYERS,
    # vocabulary
    "vocab_size": VOCAB,
    # MoE
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "top_k": 2, "moe_k": 2,
    "moe_intermediate_size": 32, "expert_intermediate_size": 32,
    "shared_expert_intermediate_size": 64, "n_shared_experts": 1, "num_shared_experts": 1,
    "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
    # multi-head latent attention
    "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 16, "index_head_dim": 16, "index_n_heads": 2, "index_topk": 4,
    # state-space / recurrent
    "state_size": 8, "d_state": 8, "mamba_d_state": 8, "ssm_state_size": 8,
    "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_head_dim": 16, "mamba_n_groups": 1,
    "n_groups": 1, "chunk_size": 8, "mamba_chunk_size": 8, "time_step_rank": 8,
    "mamba_expand": 2, "expand": 2, "conv_kernel": 4, "mamba_d_conv": 4,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "lru_width": 64,
    # per-layer input embeddings (gemma3n, gemma4)
    "vocab_size_per_layer_input": VOCAB, "hidden_size_per_layer_input": 16,
    # byte-latent transformer (blt): local encoder/decoder see the global width; hash n-gram buckets
    "hidden_size_global": 64, "encoder_hash_byte_group_vocab": VOCAB,
}

# Layer placement by period / offset (hybrid attention, MoE every other layer, ...).
PERIODS = {
    "attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1,
    "full_attention_interval": 2, "decoder_sparse_step": 1, "sliding_window_pattern": 2,
}


MAX_LAYERS = 4  # hybrids get up to this many layers so that every layer kind is present

# The attributes configs name their depth by.
LAYER_COUNT_NAMES = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "num_blocks")


def _pick_layers(per_layer_lists, old_layers):
    """Indices of the original layers to keep: a small set of layers (greedy set cover, at most
    MAX_LAYERS) that shows every kind any per-layer list (layer types, block types, MLP types,
    per-layer config overrides, membership in a layer-index list) distinguishes, in their original
    order, topped up to NUM_LAYERS with the first layers."""
    want = {(k, _key(v)) for k, lst in enumerate(per_layer_lists) for v in lst}
    picked = []
    while want and len(picked) < MAX_LAYERS:
        gain = [len(want & {(k, _key(lst[i])) for k, lst in enumerate(per_layer_lists)}) for i in range(old_layers)]
        best = max(range(old_layers), key=lambda i: (gain[i], -i))
        if gain[best] == 0:
            break
        picked.append(best)
        want -= {(k, _key(lst[best])) for k, lst in enumerate(per_layer_lists)}
    for i in range(old_layers):
        if len(picked) >= NUM_LAYERS:
            break
        if i not in picked:
            picked.append(i)
    return sorted(picked)


def _is_index_list(name, value, old_layers):
    return (isinstance(value, (list, tuple)) and name.endswith(("idxs", "ids", "indices", "_layers"))
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < old_layers for v in value)
            and len(set(value)) == len(value))


def _key(v):
    return repr(sorted(v.items())) if isinstance(v, dict) else repr(v)


# The few architectures the generic rules cannot shrink, keyed by model_type: config values (passed
# to the config class) plus, under "_layers", the original layer indices to keep. Each entry says
# why; everything else is derived by tiny_config.
ARCH_OVERRIDES = {
    # Default configs whose layer pattern has no attention layer at all (pure Mamba): keep one, as
    # the released hybrid checkpoints have (and generate's cache needs an attention layer).
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    # Default configs the model code cannot build: fields it reads that the default leaves unset,
    # set as the released checkpoints' configs set them.
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    # DbrxAttention reads attn_config.rope_theta, and clamps with clip_qkv, which fails when it is None
    # (the default): both as in the released dbrx-instruct config.
    "dbrx": {"attn_config": {"rope_theta": 500000.0, "clip_qkv": 8.0}},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},  # default layer_types is None
    "qwen4_exp_text": {  # default has indexed_attention layers but no QSA indexer sizes
        "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 4,
        "indexer_compress_ratio": 2,
    },
    "xmod": {"default_language": "en_XX"},  # else forward asks for set_default_language()
    # Recurrent models whose eval-mode forward updates the state cache in place, which autograd
    # rejects in the backward of the training step; their own train mode does not cache, so the
    # training step runs without it. generate still uses the cache (use_cache=True there).
    "rwkv": {"use_cache": False},
    # xlstm also: its config rounds hidden * qk_dim_factor up to a multiple of 64 for the cache's
    # head size, the model does not; hidden 128 keeps the two equal.
    "xlstm": {"use_cache": False, "hidden_size": 128},
    # Derived sizes the generic rules do not reach. reformer then still fails on CPU, genuinely:
    # its backward asserts train mode, and the sweep runs eval mode (no dropout).
    "reformer": {"axial_pos_shape": (4, 8), "axial_pos_embds_dim": (16, 48)},  # dims sum to hidden
    # Layer patterns that need more than the default NUM_LAYERS.
    "zamba": {  # one shared transformer block used by every hybrid layer: two hybrid layers share it
        "num_hidden_layers": 4, "layers_block_type": ["linear_attention", "hybrid", "linear_attention", "hybrid"],
    },
    "gemma3n_text": {  # last num_kv_shared_layers reuse the KV of the last sliding/full layer before them
        "_layers": [0, 4, 30, 34], "num_kv_shared_layers": 2,
    },
}

# Sub-configs that make an entry a multimodal (or audio) model rather than a text decoder.
NON_TEXT_SUBCONFIG_WORDS = ("vision", "audio", "image", "speech", "visual", "encoder", "vq")


class ArchTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise ArchTimeout("per-architecture time limit reached")


def _default_config(model_type):
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]()


def _causal_lm_class(cfg):
    """The class AutoModelForCausalLM builds for this config, or None."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(cfg)]
    except KeyError:
        return None


def text_decoder_config_class(cfg):
    """The text sub-config class when this mapping entry's causal-LM class is a plain text decoder
    built from the wrapper's ``text_config`` (llama4 -> Llama4ForCausalLM on Llama4TextConfig), else
    None (a real multimodal class, or no text sub-config)."""
    text_cls = (getattr(type(cfg), "sub_configs", {}) or {}).get("text_config")
    model_cls = _causal_lm_class(cfg)
    if model_cls is not None and isinstance(text_cls, type) and \
            issubclass(text_cls, model_cls.config_class) and getattr(text_cls, "model_type", None):
        return text_cls
    return None


def skip_reason(model_type, cfg):
    """Why this mapping entry is not a text decoder we sweep, or None."""
    if getattr(cfg, "is_encoder_decoder", False):
        return "encoder-decoder (seq2seq) model; not a standalone text decoder"
    if text_decoder_config_class(cfg) is not None:
        return None  # swept with its shrunk text sub-config
    if type(cfg).model_type in TEXT_DESPITE_SUBCONFIGS:
        return None
    if getattr(_causal_lm_class(cfg), "input_modalities", None) in ("text", ("text",)):
        return None  # a text-only class of a multimodal family (MoshiForCausalLM): its other sub-configs go unused
    subs = sorted(getattr(type(cfg), "sub_configs", {}) or {})
    non_text = [s for s in subs if any(w in s for w in NON_TEXT_SUBCONFIG_WORDS)]
    if non_text:
        return f"multimodal/audio wrapper (sub-configs: {', '.join(subs)}); not a text decoder"
    return None  # a wrapper around just a text sub-config (fuyu) is shrunk through it


# Text decoders whose sub-config names look multimodal.
TEXT_DESPITE_SUBCONFIGS = {
    # byte-latent transformer: encoder_config/decoder_config are its local byte encoder/decoder. Its
    # forward fails on CPU, upstream: BltModel builds DynamicCache(config=BltConfig), and BltConfig
    # has no num_hidden_layers (the layer counts live in the sub-configs).
    "blt": "byte-latent transformer",
}

# Mapping entries that are not standalone text decoders although their config looks like one.
NOT_STANDALONE = {
    "gemma4_assistant": "assisted-decoding drafter: forward needs the main Gemma 4 model's inputs_embeds and "
                        "shared_kv_states; not a standalone text decoder",
    "gemma4_unified_assistant": "assisted-decoding drafter: forward needs the main Gemma 4 model's inputs_embeds "
                                "and shared_kv_states; not a standalone text decoder",
}


MAX_PARAMS = 20_000_000


def _raw(cfg, name, default=None):
    """An attribute's global value, also for per-layer (heterogeneous) attributes."""
    get = getattr(cfg, "_getattr_without_heterogeneous_validation", None)
    if get is not None:
        return get(name, default)
    return getattr(cfg, name, default)


def _has(cfg, name):
    has = getattr(cfg, "_hasattr_without_heterogeneous_validation", None)
    return has(name) if has is not None else hasattr(cfg, name)


def _settable(cfg, name):
    return _has(cfg, name) and not isinstance(getattr(type(cfg), name, None), property)


def _shrink_values(cfg):
    """SHRINK's values for the attributes this config has (nested sub-configs included)."""
    kwargs = {k: v for k, v in SHRINK.items() if _settable(cfg, k) and not isinstance(_raw(cfg, k), bool)}
    for name in sorted(getattr(type(cfg), "sub_configs", {}) or {}):
        sub = _raw(cfg, name)
        if sub is not None and hasattr(sub, "to_dict"):  # e.g. dbrx's attn_config / ffn_config
            sub_kwargs = _shrink_values(sub)
            if sub_kwargs:
                kwargs[name] = sub_kwargs
    return kwargs


# (heads, head size) attribute pairs of state-space mixers: heads * head size == expand * hidden.
SSM_HEADS = (("num_heads", "head_dim"), ("mamba_n_heads", "mamba_d_head"), ("mamba_num_heads", "mamba_head_dim"))


def _derived_sizes(base, kwargs):
    """Sizes the config relates to others: keep the relation the default config had."""
    new = lambda k: kwargs.get(k, _raw(base, k))  # noqa: E731
    hidden, base_hidden = new("hidden_size"), _raw(base, "hidden_size")
    heads, base_heads = new("num_attention_heads"), _raw(base, "num_attention_heads")
    # Multi-head latent attention decompresses K/V per query head: as many KV heads as heads.
    if "kv_lora_rank" in kwargs and "num_key_value_heads" in kwargs and base_heads == _raw(base, "num_key_value_heads"):
        kwargs["num_key_value_heads"] = heads
    # Partial rotary embeddings given as a width (gptj, codegen): same fraction of the new head size.
    rot = _raw(base, "rotary_dim")
    if isinstance(rot, int) and isinstance(base_hidden, int) and isinstance(base_heads, int) and base_heads:
        base_hd = _raw(base, "head_dim") if isinstance(_raw(base, "head_dim"), int) else base_hidden // base_heads
        new_hd = new("head_dim") if isinstance(new("head_dim"), int) else hidden // heads
        kwargs["rotary_dim"] = max(2, 2 * round(rot / base_hd * new_hd / 2))
    # State-space heads: heads * head size == expand * hidden (mamba2, nemotron_h, ...).
    expand_name = next((e for e in ("expand", "mamba_expand") if isinstance(_raw(base, e), int)), None)
    for h, d in SSM_HEADS:
        bh, bd = _raw(base, h), _raw(base, d)
        if not (isinstance(bh, int) and isinstance(bd, int) and expand_name and isinstance(base_hidden, int)):
            continue
        if bh * bd == _raw(base, expand_name) * base_hidden:
            kwargs[h] = new(expand_name) * hidden // new(d)
    # An explicit SSM inner width that was heads * head size (falcon_h1's mamba_d_ssm).
    for h, d in SSM_HEADS:
        bh, bd, bs = _raw(base, h), _raw(base, d), _raw(base, "mamba_d_ssm")
        if isinstance(bs, int) and isinstance(bh, int) and isinstance(bd, int) and bs == bh * bd:
            kwargs["mamba_d_ssm"] = new(h) * new(d)


def _scaled(value, base_global, new_global):
    """A per-layer override, scaled as the global value was (head_dim 512 vs 256 -> 2x the new one)."""
    if isinstance(value, int) and not isinstance(value, bool) and isinstance(base_global, int) and base_global \
            and isinstance(new_global, int):
        return max(1, round(value * new_global / base_global))
    return value


def tiny_config(model_type):
    """The architecture's own config class with its sizes shrunk (only attributes it has)."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    base = cls()
    special = dict(ARCH_OVERRIDES.get(model_type, {}))
    old_layers = None
    for name in LAYER_COUNT_NAMES:
        if isinstance(_raw(base, name), int):
            old_layers = _raw(base, name)
            break

    kwargs = _shrink_values(base)
    # Hybrids that place attention/expert layers by period: keep one of each kind in 2 layers.
    for name, value in PERIODS.items():
        if _settable(base, name):
            kwargs[name] = value
    # Multi-head latent attention: the config's head_dim is its rotary part.
    if "qk_rope_head_dim" in kwargs and "head_dim" in kwargs:
        kwargs["head_dim"] = kwargs["qk_rope_head_dim"]
    _derived_sizes(base, kwargs)

    # Per-layer attributes (layer_types, block types, MLP types, per-layer config overrides): keep
    # the original layers that cover every kind any of them distinguishes.
    spec = base.__dict__.get("_heterogeneity_spec")
    lists, index_lists = {}, {}
    if old_layers:
        for name, value in vars(base).items():
            if name.startswith("_") or name in kwargs or name in special or not isinstance(value, (list, tuple)):
                continue
            if len(value) == old_layers:
                lists[name] = list(value)
            elif name.endswith(("layer_types", "block_types", "block_type")) and value and \
                    all(isinstance(v, str) for v in value) and len(value) < old_layers:
                lists[name] = [value[i % len(value)] for i in range(old_layers)]  # a repeating pattern
        for name, value in vars(base).items():  # layer-index lists (full_attn_idxs, moe_layers, ...)
            if _is_index_list(name, value, old_layers) and name not in kwargs and name not in special:
                index_lists[name] = value
                lists.pop(name, None)
                lists["in:" + name] = [i in value for i in range(old_layers)]
        if spec is not None and spec.per_layer_overrides:
            lists["per_layer_config"] = [spec.per_layer_overrides.get(i, {}) for i in range(old_layers)]
    picks = special.pop("_layers", None)
    if old_layers and picks is None:
        picks = _pick_layers(list(lists.values()), old_layers)
    if old_layers:
        n = len(picks)
        for name in LAYER_COUNT_NAMES:
            if name in kwargs or (_settable(base, name) and isinstance(_raw(base, name), int)):
                kwargs[name] = n
        if "max_window_layers" in kwargs:
            kwargs["max_window_layers"] = n
        for name, value in index_lists.items():
            kwargs[name] = [j for j, i in enumerate(picks) if i in value]
        for name, value in lists.items():
            if name.startswith("in:"):
                continue
            kept = [value[i] for i in picks]
            if name == "per_layer_config":
                kept = {j: {a: _scaled(v, _raw(base, a), kwargs.get(a, _raw(base, a))) for a, v in o.items()}
                        for j, o in enumerate(kept) if o}
            kwargs[name] = kept
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        if _has(base, name):
            kwargs[name] = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}.get(name, 1)
    # Other special token ids must stay inside the shrunk vocabulary.
    next_id = VOCAB - 1
    for name, value in vars(base).items():
        if name.endswith(("_token_id", "_token_index")) and name not in kwargs and isinstance(value, int):
            if value >= VOCAB:
                kwargs[name] = next_id
                next_id -= 1
    if _has(base, "is_decoder") and not base.is_decoder:
        kwargs["is_decoder"] = True  # encoder families with an LM head run as decoders
    if _has(base, "use_cache"):
        kwargs["use_cache"] = True
    for name, value in special.items():  # the architecture's own table entry, last
        if isinstance(value, dict) and isinstance(kwargs.get(name), dict):
            kwargs[name] = {**kwargs[name], **value}
        elif value is None:
            kwargs.pop(name, None)
        else:
            kwargs[name] = value
    try:
        cfg = cls(**kwargs)
    except Exception:
        # Some derived fields reject one of our values: set them after construction instead.
        cfg = cls()
        for k, v in kwargs.items():
            setattr(cfg, k, v)
    return cfg


def _run_device(model, device, dtype, input_ids):
    """forward+labels, backward, AdamW step, greedy generate; returns measurements per stage."""
    stage = "to_device"
    res = {}
    try:
        model = model.to(device=device, dtype=dtype)
        # Distinct parameter tensors: fewer on CPU than here means .to() untied shared weights.
        res["n_params"] = len(list(model.parameters()))
        model.eval()  # dropout off: the two devices draw different random streams
        ids = input_ids.to(device)
        stage = "forward"
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
        res["loss"] = float(out.loss.detach().float().cpu())
        res["logits"] = out.logits.detach().float().cpu()
        stage = "backward"
        out.loss.backward()
        res["grad_norms"] = {
            n: float(p.grad.detach().float().norm().cpu()) for n, p in model.named_parameters() if p.grad is not None
        }
        stage = "optimizer"
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        opt.step()
        opt.zero_grad(set_to_none=True)
        stage = "generate"
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=NEW_TOKENS,
                do_sample=False, use_cache=True, pad_token_id=0,
            )
        res["tokens"] = gen[0, ids.shape[1]:].cpu().tolist()
        if device == "neuron":
            torch.neuron.synchronize()
        stage = None
    except ArchTimeout:
        raise
    except Exception as e:  # noqa: BLE001 - the sweep records every failure and goes on
        res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        res["traceback"] = traceback.format_exc(limit=3)[-1500:]
    res["stage"] = stage
    return res


def _run_compiled(model, dtype, input_ids):
    """The compiled column: forward with labels and backward through
    torch.compile(backend="neuron", fullgraph=True), from the same initial weights as the eager
    runs; loss, logits and gradient norms to compare with eager neuron's."""
    res = {}
    cpu_model = copy.deepcopy(model)  # to tell a graph break of the model's code from ours
    try:
        model = model.to(device="neuron", dtype=dtype)
        model.eval()
        ids = input_ids.to("neuron")
        torch._dynamo.reset()
        torch.neuron.reset_dynamo_metrics()
        compiled = torch.compile(model, backend="neuron", fullgraph=True)
        t0 = time.perf_counter()
        out = compiled(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
        out.loss.backward()
        torch.neuron.synchronize()
        res["seconds"] = round(time.perf_counter() - t0, 2)
        res["loss"] = float(out.loss.detach().float().cpu())
        res["logits"] = out.logits.detach().float().cpu()
        res["grad_norms"] = {
            n: float(p.grad.detach().float().norm().cpu()) for n, p in model.named_parameters() if p.grad is not None
        }
        m = torch.neuron.get_dynamo_metrics()
        res["programs"] = m["programs"]
    except ArchTimeout:
        raise
    except Exception as e:  # noqa: BLE001 - recorded in the column
        # Dynamo wraps the backend's error ("backend='neuron' raised:" then the cause): keep the
        # first two non-empty lines so the column shows the cause.
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        res["error"] = f"{type(e).__name__}: {' '.join(lines[:2])}"[:300]
        if isinstance(e, DYNAMO_TRACE_ERRORS) and graph_breaks_without_neuron(
                cpu_model.to(dtype=dtype), input_ids):
            what = ("graph break" if isinstance(e, torch._dynamo.exc.Unsupported)
                    else "untraceable code")
            res["error"] = f"{what} {MODEL_CODE_MARK}: {res['error']}"[:300]
    finally:
        torch._dynamo.reset()
    return res


# What Dynamo raises when it cannot trace a model's code as one graph: a graph break, or a
# user-code error such as a data-dependent size it cannot specialise under fullgraph=True.
DYNAMO_TRACE_ERRORS = (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError)
MODEL_CODE_MARK = "in the model's code (also on the CPU with Dynamo alone, backend='eager')"


def graph_breaks_without_neuron(model, input_ids) -> bool:
    """Whether `model`'s forward with labels fails to trace as one graph (fullgraph=True) on the
    CPU with Dynamo alone (backend="eager"): a property of the model's code, not of the neuron
    backend (or of any backend)."""
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model.eval(), backend="eager", fullgraph=True)
        compiled(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=input_ids)
        return False
    except DYNAMO_TRACE_ERRORS:
        return True
    except Exception:  # noqa: BLE001 - another failure says nothing about a graph break
        return False
    finally:
        torch._dynamo.reset()


def compare_compiled(comp, neu, dtype):
    """The compiled column's verdict against eager neuron: (status, detail)."""
    if "error" in comp:
        return "fail", comp["error"]
    tol = TOLERANCES[dtype]
    loss = _rel(comp["loss"], neu["loss"])
    if comp["logits"].shape != neu["logits"].shape:
        return "fail", f"logits shape {tuple(comp['logits'].shape)} != {tuple(neu['logits'].shape)}"
    logits = float((comp["logits"] - neu["logits"]).abs().max())
    gn = [_rel(comp["grad_norms"].get(k, float("nan")), v) for k, v in neu["grad_norms"].items()]
    grad = max(gn) if gn else 0.0
    if not loss <= tol["loss"]:
        return "fail", f"loss diff {loss:.3g} > {tol['loss']}"
    if not logits <= tol["logits"]:
        return "fail", f"logits max diff {logits:.3g} > {tol['logits']}"
    if not grad <= tol["grad"]:
        return "fail", f"grad norm rel diff {grad:.3g} > {tol['grad']}"
    return "pass", f"{comp['programs']} programs, {comp['seconds']} s; loss {loss:.2g}, logits {logits:.2g}, grad {grad:.2g}"


def _rel(a, b):
    return abs(a - b) / max(1.0, abs(b))


def compare(neu, cpu, dtype):
    """The failing stage and the reason (max difference), or (None, diffs) on a pass."""
    tol = TOLERANCES[dtype]
    diffs = {}
    if not (math.isfinite(cpu["loss"])):
        return "forward", "CPU loss is not finite", diffs
    diffs["loss"] = _rel(neu["loss"], cpu["loss"])
    if neu["logits"].shape != cpu["logits"].shape:
        return "forward", f"logits shape {tuple(neu['logits'].shape)} != {tuple(cpu['logits'].shape)}", diffs
    diffs["logits"] = float((neu["logits"] - cpu["logits"]).abs().max())
    gn = [_rel(neu["grad_norms"].get(k, float("nan")), v) for k, v in cpu["grad_norms"].items()]
    diffs["grad_norm"] = max(gn) if gn else 0.0
    if not diffs["loss"] <= tol["loss"]:
        return "forward", f"loss diff {diffs['loss']:.3g} > {tol['loss']}", diffs
    if not diffs["logits"] <= tol["logits"]:
        return "forward", f"logits max diff {diffs['logits']:.3g} > {tol['logits']}", diffs
    if not diffs["grad_norm"] <= tol["grad"]:
        return "backward", f"grad norm rel diff {diffs['grad_norm']:.3g} > {tol['grad']}", diffs
    if neu["tokens"] != cpu["tokens"]:
        return "generate", f"tokens differ: neuron {neu['tokens']} vs CPU {cpu['tokens']}", diffs
    return None, "", diffs


def _median_times(initial, dtype, input_ids, repeats, cpu_s, neuron_s):
    """Median wall time per device over `repeats` runs (the compared run is the first), the
    devices taking turns so that a slow spell of the machine hits both alike."""
    times = {"cpu": [cpu_s], "neuron": [neuron_s]}
    for _ in range(repeats - 1):
        for device in ("cpu", "neuron"):
            model = copy.deepcopy(initial)
            t0 = time.perf_counter()
            _run_device(model, device, dtype, input_ids)
            times[device].append(time.perf_counter() - t0)
    return (round(statistics.median(times["cpu"]), 4), round(statistics.median(times["neuron"]), 4))


def sweep_one(model_type, class_name, dtype, time_limit, repeats=1, compiled=False):
    """One architecture: skipped, fails on CPU, pass, or the failing neuron stage. With
    `compiled`, an architecture that passes eagerly also gets the compiled column
    (rec["compiled"], rec["compiled_detail"]): fullgraph forward+backward against eager neuron."""
    from transformers import AutoModelForCausalLM

    rec = {"model_type": model_type, "class": class_name}
    phase = "cpu"  # a timeout before the neuron run is the architecture's own (CPU) problem
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(int(time_limit))
    try:
        if model_type in NOT_STANDALONE:
            rec.update(status="skipped", reason=NOT_STANDALONE[model_type])
            return rec
        try:
            base = _default_config(model_type)
        except Exception as e:  # noqa: BLE001
            rec.update(status="skipped", reason=f"config cannot be built offline: {type(e).__name__}: {e}"[:300])
            return rec
        reason = skip_reason(model_type, base)
        if reason:
            rec.update(status="skipped", reason=reason)
            return rec
        try:
            text_cls = text_decoder_config_class(base)
            if text_cls is not None:
                # A wrapper config whose causal-LM class is the text decoder: shrink the text
                # sub-config, build from the wrapper config as AutoModelForCausalLM does.
                text_cfg = tiny_config(text_cls.model_type)
                try:
                    cfg = type(base)(text_config=text_cfg)
                    rec["config"] = f"{type(base).__name__}.text_config ({text_cls.__name__}, shrunk)"
                except Exception as e:  # noqa: BLE001
                    # The wrapper checks the text sizes against its (unused) vision/audio configs:
                    # build the same class from the text config alone.
                    cfg = text_cfg
                    rec["config"] = (f"{text_cls.__name__} alone (the causal-LM class's config; "
                                     f"{type(base).__name__} rejects it: {[ln.strip() for ln in str(e).splitlines() if ln.strip()][-1][:100]})")
                overrides = ARCH_OVERRIDES.get(text_cls.model_type, {})
            else:
                cfg = tiny_config(model_type)
                rec["config"] = type(cfg).__name__
                if "text_config" in (getattr(type(cfg), "sub_configs", {}) or {}):
                    rec["config"] += " (its text_config shrunk)"
                overrides = ARCH_OVERRIDES.get(model_type, {})
            if overrides:
                rec["config_overrides"] = sorted(k.lstrip("_") for k in overrides)
            with warnings.catch_warnings(), torch.device("meta"):
                warnings.simplefilter("ignore")
                n = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
            if n > MAX_PARAMS:
                rec.update(status="skipped", reason=f"shrunk config still has {n / 1e6:.0f}M parameters "
                           "(sizes the generic shrink does not reach)")
                return rec
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cpu_model = AutoModelForCausalLM.from_config(cfg)
            neu_model = copy.deepcopy(cpu_model)
            initial = copy.deepcopy(cpu_model)  # the timing repeats start from the same weights
            rec["attn_implementation"] = getattr(cpu_model.config, "_attn_implementation", None)
            rec["parameters"] = sum(p.numel() for p in cpu_model.parameters())
        except ArchTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            rec.update(status="fails on CPU", stage="build", error=f"{type(e).__name__}: {e}"[:300])
            return rec
        vocab = getattr(cpu_model.config, "vocab_size", VOCAB) or VOCAB
        g = torch.Generator().manual_seed(0)
        input_ids = torch.randint(3, min(vocab, VOCAB), (BATCH, SEQ), generator=g)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Untimed warm-up: the first run of an architecture pays Python-side first-use costs
            # (lazy imports, generation setup) that would otherwise be charged to whichever
            # device runs first.
            _run_device(copy.deepcopy(cpu_model), "cpu", dtype, input_ids)
            t0 = time.perf_counter()
            cpu = _run_device(cpu_model, "cpu", dtype, input_ids)
            rec["cpu_s"] = round(time.perf_counter() - t0, 3)
            if cpu["stage"] is not None:
                rec.update(status="fails on CPU", stage=cpu["stage"], error=cpu["error"])
                return rec
            torch_neuronx.clear_op_tracking()
            phase = "neuron"
            t0 = time.perf_counter()
            neu = _run_device(neu_model, "neuron", dtype, input_ids)
            rec["neuron_s"] = round(time.perf_counter() - t0, 3)
            rec["fallback_ops"] = torch_neuronx.get_fallback_ops()
            if neu["stage"] is None and repeats > 1:
                rec["cpu_s"], rec["neuron_s"] = _median_times(initial, dtype, input_ids, repeats,
                                                              rec["cpu_s"], rec["neuron_s"])
        if neu["stage"] is not None:
            rec.update(status="fail", stage=neu["stage"], error=neu["error"], traceback=neu["traceback"])
            return rec
        stage, why, diffs = compare(neu, cpu, dtype)
        rec["max_diff"] = diffs
        rec["tokens"] = neu["tokens"]
        if stage:
            if neu.get("n_params", 0) > cpu.get("n_params", 0):
                why += (f"; .to('neuron') untied shared weights ({cpu['n_params']} distinct parameters on CPU, "
                        f"{neu['n_params']} on neuron)")
            rec.update(status="fail", stage=stage, error=why)
        else:
            rec["status"] = "pass"
            if compiled:
                phase = "compiled"
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    comp = _run_compiled(copy.deepcopy(initial), dtype, input_ids)
                rec["compiled"], rec["compiled_detail"] = compare_compiled(comp, neu, dtype)
        return rec
    except ArchTimeout as e:
        if phase == "compiled":
            rec.update(compiled="fail", compiled_detail=f"{e} ({time_limit} s) while compiling")
            return rec
        status = "fail" if phase == "neuron" else "fails on CPU"
        rec.update(status=status, stage="timeout", error=f"{e} ({time_limit} s) during the {phase} run")
        return rec
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def summarize(records):
    counts = {"total": len(records)}
    for r in records:
        key = r["status"] if r["status"] != "fail" else f"fail:{r['stage']}"
        counts[key] = counts.get(key, 0) + 1
    fallback = sorted({op for r in records for op in r.get("fallback_ops", [])})
    # Timing compares like with like: only architectures that ran every stage on both devices.
    neu = sum(r.get("neuron_s", 0.0) for r in records if r["status"] == "pass")
    cpu = sum(r.get("cpu_s", 0.0) for r in records if r["status"] == "pass")
    return counts, fallback, neu, cpu


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _compiled_count_line(rows, where):
    """The totals line of the compiled column over `rows` (architectures that pass eagerly)."""
    passed = sum(r["compiled"] == "pass" for r in rows)
    model_code = sum(r["compiled"] == "fail" and MODEL_CODE_MARK in r.get("compiled_detail", "")
                     for r in rows)
    line = (f"- compiled (`torch.compile(backend=\"neuron\", fullgraph=True)` forward+backward "
            f"against eager neuron, same tolerances; {where}): **{passed}** pass of {len(rows)} "
            "that pass eagerly")
    if model_code:
        line += (f"; {model_code} of the {len(rows) - passed} others cannot be traced as one graph "
                 "by Dynamo alone on the CPU either (the model's code, not the backend)")
    return line


def report_stem(dtype: str, compiled: bool) -> str:
    stem = "hf_coverage" if dtype == "float32" else f"hf_coverage_{dtype}"
    # The compiled column is its own report, next to the eager sweep's.
    return stem + "_compiled" if compiled else stem


def write_reports(records, meta, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    stem = report_stem(meta["dtype"], meta.get("compiled"))
    counts, fallback, neu_s, cpu_s = summarize(records)
    meta = dict(meta, counts=counts, fallback_ops=fallback, neuron_s=round(neu_s, 2), cpu_s=round(cpu_s, 2))
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump({"meta": meta, "architectures": records}, f, indent=1, default=str)
    ran = counts.get("pass", 0) + sum(v for k, v in counts.items() if k.startswith("fail:"))
    with_compiled = [r for r in records if "compiled" in r]
    lines = [
        "# Hugging Face causal-LM coverage on `neuron`",
        "",
        "Generated by `python testing/hf_sweep.py` (`make coverage`); do not edit by hand.",
        "",
        f"Run {meta['date']} on {meta['machine']}, torch {meta['torch']}, transformers "
        f"{meta['transformers']}, dtype {meta['dtype']}, sweep wall time {meta['wall_s']:.0f} s.",
        "",
        "Each architecture: tiny config from its own config class "
        f"({NUM_LAYERS} layers, up to {MAX_LAYERS} where a hybrid layer pattern needs them to keep every "
        f"layer kind; hidden 64; vocab {VOCAB}; a wrapper whose causal-LM class is the text decoder is "
        "built from its shrunk text sub-config, the detail column names the config and any per-architecture "
        "`ARCH_OVERRIDES` of `hf_sweep.py`), random weights from seed 0, default "
        "attention implementation, eval mode (no dropout); after one untimed CPU warm-up run, on neuron and on CPU: forward with "
        "labels, backward, one AdamW step, greedy generate of 8 tokens with the KV cache. Pass: "
        "loss, logits and every parameter's gradient norm within tolerance of CPU "
        f"({TOLERANCES[meta['torch_dtype']]}) and identical tokens.",
        "",
        "## Totals",
        "",
        f"- mapping entries: **{counts['total']}**",
        f"- pass: **{counts.get('pass', 0)}** of {ran} that run on CPU and reach the comparison",
    ]
    for k in sorted(counts):
        if k.startswith("fail:"):
            lines.append(f"- fail at {k[5:]}: {counts[k]}")
    lines += [
        f"- fails on CPU (not a neuron failure): {counts.get('fails on CPU', 0)} — the model's own code "
        "raised on CPU with its tiny config: a limitation of the architecture's code, or a config the "
        "generic shrink made inconsistent (per-layer attributes, head sizes it derives)",
        f"- skipped (not a text decoder, config not buildable offline, or not shrinkable "
        f"generically): {counts.get('skipped', 0)}",
        f"- CPU-fallback ops seen over the sweep: {', '.join(f'`{o}`' for o in fallback) or 'none'}",
    ]
    if with_compiled:
        lines.append(_compiled_count_line(with_compiled, "`--compiled`"))
    compiled_report = os.path.join(out_dir, stem + "_compiled.json")
    if not meta.get("compiled") and not with_compiled and os.path.exists(compiled_report):
        # The compiled column runs on its own (`--compiled`, CI subset by default): its count here.
        with open(compiled_report) as f:
            other = json.load(f)
        rows = [r for r in other["architectures"] if "compiled" in r]
        lines.append(_compiled_count_line(
            rows, f"`--compiled`, run {other['meta']['date']} over {len(other['architectures'])} "
            "architectures") + f" — [{stem}_compiled.md]({stem}_compiled.md)")
    lines += [
        f"- wall time of the passing architectures' runs (per architecture the median of "
        f"{meta.get('repeats', 1)} timed runs per device, devices taking turns): neuron {neu_s:.1f} s, "
        f"CPU {cpu_s:.1f} s (neuron / CPU = {neu_s / cpu_s if cpu_s else float('nan'):.3f})",
        "",
        "## Architectures",
        "",
        "| model type | class | result | stage | detail | fallback ops | neuron s | CPU s |"
        + (" compiled |" if with_compiled else ""),
        "|---|---|---|---|---|---|---:|---:|" + ("---|" if with_compiled else ""),
    ]
    for r in records:
        if r["status"] == "pass":
            d = r.get("max_diff", {})
            detail = f"loss {d.get('loss', 0):.2g}, logits {d.get('logits', 0):.2g}, grad {d.get('grad_norm', 0):.2g}"
        else:
            detail = r.get("error") or r.get("reason", "")
        if "text_config" in r.get("config", "") or " alone " in r.get("config", ""):
            detail += f"; config: {r['config']}"
        if r.get("config_overrides"):
            detail += f"; ARCH_OVERRIDES: {', '.join(r['config_overrides'])}"
        lines.append(
            f"| {r['model_type']} | {r['class']} | {r['status']} | {r.get('stage', '')} | {_cell(detail)[:200]} | "
            f"{_cell(', '.join(r.get('fallback_ops', [])))} | {r.get('neuron_s', '')} | {r.get('cpu_s', '')} |"
            + (f" {_cell(r.get('compiled', ''))}{': ' + _cell(r.get('compiled_detail', ''))[:120] if r.get('compiled') == 'fail' else ''} |"
               if with_compiled else "")
        )
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    import transformers

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help="comma-separated model types")
    p.add_argument("--limit", type=int, default=0, help="first N entries only")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--output-dir", default="docs")
    p.add_argument("--time-limit", type=float, default=180, help="seconds per architecture")
    p.add_argument("--compiled", action="store_true",
                   help="add the compiled column: fullgraph torch.compile(backend='neuron') "
                        "forward+backward of each eagerly passing architecture against eager neuron")
    p.add_argument("--repeats", type=int, default=3,
                   help="timed runs per device of each passing architecture; the median is reported")
    p.add_argument("--resume", action="store_true",
                   help="keep the architectures already in the output directory's report of this "
                        "dtype and column, sweep only the others; the report is rewritten after "
                        "every architecture, so an interrupted sweep resumes where it stopped")
    args = p.parse_args(argv)
    transformers.logging.set_verbosity_error()
    dtype = getattr(torch, args.dtype)

    entries = list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items())
    print(f"MODEL_FOR_CAUSAL_LM_MAPPING_NAMES: {len(entries)} entries", flush=True)
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [w for w in wanted if w not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES]
        if unknown:
            p.error(f"not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES: {', '.join(unknown)}")
        entries = [(k, v) for k, v in entries if k in wanted]
    if args.limit:
        entries = entries[: args.limit]
    done, earlier_wall_s = {}, 0.0
    report = os.path.join(args.output_dir, report_stem(args.dtype, args.compiled) + ".json")
    if args.resume and os.path.exists(report):
        with open(report) as f:
            previous = json.load(f)
        done = {r["model_type"]: r for r in previous["architectures"]}
        earlier_wall_s = previous["meta"].get("wall_s", 0.0)
        print(f"resuming: {len(done)} architectures already in {report}", flush=True)
    print(f"sweeping {sum(mt not in done for mt, _ in entries)} ({args.dtype})", flush=True)

    t0 = time.perf_counter()

    def meta_now():
        return dict(
            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            machine=f"{platform.machine()}, {os.cpu_count()} cores",
            torch=torch.__version__, transformers=transformers.__version__, dtype=args.dtype,
            torch_dtype=dtype, wall_s=earlier_wall_s + time.perf_counter() - t0,
            argv=sys.argv[1:], repeats=args.repeats, compiled=args.compiled,
        )

    records = []
    for i, (mt, cls) in enumerate(entries, 1):
        if mt in done:
            records.append(done[mt])
            continue
        r = sweep_one(mt, cls, dtype, args.time_limit, args.repeats, compiled=args.compiled)
        records.append(r)
        if args.resume:
            write_reports(records + [done[m] for m, _ in entries[i:] if m in done], meta_now(),
                          args.output_dir)
        extra = r.get("stage", "") + (": " + (r.get("error") or r.get("reason", "")) if r["status"] != "pass" else "")
        if "compiled" in r:
            extra += f" | compiled: {r['compiled']} {r.get('compiled_detail', '')}"
        print(f"[{i}/{len(entries)}] {mt}: {r['status']} {extra}"[:240], flush=True)
    meta = meta_now()
    write_reports(records, meta, args.output_dir)
    counts, fallback, neu_s, cpu_s = summarize(records)
    print(json.dumps(counts), flush=True)
    print(f"fallback ops: {fallback}", flush=True)
    print(f"neuron {neu_s:.1f} s, CPU {cpu_s:.1f} s, sweep {meta['wall_s']:.0f} s", flush=True)
    return records


if __name__ == "__main__":
    main()
