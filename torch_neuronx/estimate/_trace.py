"""Tracing one rank of a model at full size without its memory, one layer at a time.

The model is built from its config under FakeTensorMode on the ``neuron`` device (shapes and
dtypes, no storage) with its parameters sharded as one rank of the layout holds them
(``_shard``: by the model's own tensor- and expert-parallel plans), and one training step, one
prefill or one decode step runs under a dispatch mode that hands every ATen op to the native
bridge (csrc/backend/estimate): the op's work comes from the same FLOP models and cost builder
the eager kernels use, so a traced op is what its launch record would be.

A model's decoder layers are alike (or alike period by period): the model is traced with one
period of layers and with two, and the difference is one period's ops
(runtime/cost/LayerSplit). A projection then counts the period once per period of a pipeline
stage: a 126-layer model costs a 2-layer trace, and every layout with the same per-rank shapes
(whatever its pp, dp, recompute or ZeRO) reuses it.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch._decomp import decomposition_table
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from torch_neuronx import _C, _op_work
from torch_neuronx.estimate import _shard
from torch_neuronx.estimate._shard import ShardError

# Ops that touch no device memory: no launch, no record.
_NO_WORK = {
    "aten::empty.memory_format", "aten::empty_strided", "aten::empty_like", "aten::resize_",
    "aten::set_", "aten::lift_fresh", "aten::detach", "aten::alias", "aten::_local_scalar_dense",
    "aten::_unsafe_view",
}
# Ops the op-work table models whole although neuron runs them as composites: copies (the DMA
# engines), factories (one fill) and the grouped expert matmul. (A KV cache's in-place row update
# runs as index_copy.out or _index_put_impl_, whose row counts the new rows only.) _grouped_mm
# differs from eager: neuron has no kernel of its own for it, so eager runs PyTorch's fallback
# (the offsets read to the host, one matmul per group), which a trace on fake tensors cannot run;
# the estimate charges one grouped matmul over the experts that have rows, as a NeuronCore
# kernel does it.
_MODELLED_COMPOSITES = {
    "aten::_to_copy", "aten::clone", "aten::copy_", "aten::zeros", "aten::ones", "aten::full",
    "aten::zeros_like", "aten::ones_like", "aten::full_like", "aten::new_zeros", "aten::new_ones",
    "aten::new_full", "aten::scalar_tensor", "aten::_grouped_mm",
}
# The attention core: what selective recompute (Megatron-LM's, NxD's) reruns in the backward
# instead of keeping its activations.
_ATTENTION_CORE = re.compile(r"^aten::_scaled_dot_product.*")
_MATMULS = re.compile(r"^aten::(mm|bmm|addmm|baddbmm|matmul|linear|_grouped_mm|_scaled_dot_product.*|convolution.*)$")


def _wrapped_numbers(func, args) -> tuple:
    # A Python number where the schema wants a Tensor is a wrapped scalar (x + 0): a 0-d tensor.
    out = list(args)
    for i, (arg, value) in enumerate(zip(func._schema.arguments, args)):
        if isinstance(value, (bool, int, float)) and str(arg.type) == "Tensor":
            out[i] = torch.tensor(value)
    return tuple(out)


def _storage_key(t: torch.Tensor):
    # Unique only while the storage lives: whoever keys by it keeps the storage alive (a freed
    # storage's address is reused by the next one).
    try:
        return t.untyped_storage()._cdata
    except Exception:
        return id(t)


class _Recorder(TorchDispatchMode):
    """Hands every ATen op to the native bridge; also records the collectives the parallel plan
    implies (called by _shard's hooks) and which op produced each tensor (for what selective
    recompute keeps)."""

    def __init__(self, trace, weights=frozenset()):
        super().__init__()
        self.trace = trace
        self.phase = "forward"
        self.recording = True
        self.sources = Counter()
        self.unmodelled = Counter()
        self.weights = weights           # storage keys of the model's parameters
        self.attention = {}              # storage key -> storage, of the attention core's outputs
        # Elements of a full-width activation of one micro-batch (tokens x hidden): what every
        # tensor-parallel rank holds whole unless sequence parallelism splits it. 0: not tracked.
        self.full_width = 0
        self.trainable = None            # when a dict: storage key -> elements of trainable leaves

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if (not self.recording or name.startswith(("prim::", "profiler::")) or name in _NO_WORK
                or _op_work.returns_alias(func)):
            return func(*args, **kwargs)
        # An op neuron has no kernel of its own for but a composite one (embedding,
        # slice_backward, ...) runs as its composite kernel's parts on the device, as eager runs
        # it (torch_neuronx/_op_work.py): trace the parts.
        parts = None
        if name.split(".")[0] not in _MODELLED_COMPOSITES:
            parts = _op_work.composite_parts(func)
            if parts is None and not _op_work.runs_whole(func) and func in decomposition_table:
                parts = decomposition_table[func]  # no composite kernel either: the Python one
        if parts is not None:
            with self:
                return parts(*args, **kwargs)
        # Laid out as neuron's kernel lays them out, where torch's meta function says otherwise
        # (the fused attention's: _op_work.in_kernel_layouts), so what follows runs as in eager.
        out = (_op_work.in_kernel_layouts(func) or func)(*args, **kwargs)
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if self.trainable is not None:
            for t in tree_leaves((args, kwargs)):
                if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad:
                    self.trainable[_storage_key(t)] = t.numel()
        weight_bytes = 0
        if self.weights:
            for t in tree_leaves((args, kwargs)):
                if isinstance(t, torch.Tensor) and _storage_key(t) in self.weights:
                    weight_bytes += t.numel() * t.element_size()
        base = name.split(".")[0]
        whole = False
        if self.full_width and not _MATMULS.match(base):
            sizes = [t.numel() for t in tree_leaves((args, outputs)) if isinstance(t, torch.Tensor)]
            whole = bool(sizes) and max(sizes) == self.full_width
        source = self.trace.record(func, _wrapped_numbers(func, args), dict(kwargs), outputs,
                                   self.phase, weight_bytes, whole)
        if _ATTENTION_CORE.match(base):
            self.attention.update((_storage_key(t), t.untyped_storage()) for t in outputs)
        self.sources[source] += 1
        if source == "default":
            self.unmodelled[name] += 1
        return out

    def collective(self, kind: str, group: str, tensor, where: str) -> None:
        if self.recording:
            nbytes = tensor.nbytes if isinstance(tensor, _shard._Rows) else (
                tensor.numel() * tensor.element_size())
            self.trace.record_collective(kind, group, float(nbytes), self.phase, where)


@dataclass(frozen=True)
class Shape:
    """What decides one rank's traced ops: the shards and the step's tensors."""

    phase: str          # "train", "prefill" or "decode"
    tp: int = 1         # ranks sharing the attention and dense layers
    ep: int = 1         # ranks the experts are spread over
    expert_tp: int = 1  # ranks sharing one expert
    expert_rows_scale: float = 1.0
    batch: int = 1      # sequences one rank holds
    seq_len: int = 1    # train: tokens per sequence one rank holds; prefill: prompt tokens
    context: int = 1    # decode: KV cache positions
    query: int = 1      # decode: new tokens per sequence per step (speculation verifies k + 1)
    dtype: str = "bfloat16"


@dataclass
class RankTrace:
    """One rank's ops, split into what lies outside the layers and one period of layers."""

    outside: object          # _C._EstimateTrace
    period: object           # _C._EstimateTrace
    layers_per_period: int
    periods: int             # in the whole model
    facts: dict              # per rank: outside / per-period parameters, activations, KV cache
    ops: int                 # ops traced
    sources: Counter
    unmodelled: Counter
    notes: list = field(default_factory=list)
    shard: object = None     # _shard.ShardReport

    def stage_trace(self, layers: int, count: float = 1.0, extra=()):
        """The ops of a pipeline stage of `layers` layers (the outside ops counted once), each
        run `count` times per step; `extra`: more (trace, count, in_layer) parts."""
        periods = layers / self.layers_per_period
        parts = [(self.outside, count, False), (self.period, count * periods, True), *extra]
        return _C._estimate_combine(parts)


def _config_key(config) -> str:
    return json.dumps(config.to_dict(), sort_keys=True, default=str)


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _with_layers(config, n: int):
    """A copy of `config` with its first n layers (and the per-layer lists cut to match)."""
    out = copy.deepcopy(config)
    text = _text_config(out)
    full = text.num_hidden_layers
    text.num_hidden_layers = n
    for name in ("layer_types", "mlp_only_layers"):
        value = getattr(text, name, None)
        if isinstance(value, list) and len(value) == full:
            setattr(text, name, value[:n])
    return out


def _build(config, dtype, device="neuron"):
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model


_STRUCTURE: dict = {}


def structure(config, dtype=torch.bfloat16) -> dict:
    """Parameters of the whole model and whether its layers repeat one period (from a build on
    the meta device: no memory, no tracing)."""
    key = (_config_key(config), str(dtype))
    if key in _STRUCTURE:
        return _STRUCTURE[key]
    model = _build(config, dtype, device="meta")
    params = sum(p.numel() for p in model.parameters())
    found = _shard.decoder_layers(model)
    text = _text_config(config)
    layer_types = getattr(text, "layer_types", None)
    signatures = []
    if found:
        for i, layer in enumerate(found[1]):
            shapes = tuple((n, tuple(p.shape)) for n, p in layer.named_parameters())
            kind = layer_types[i] if isinstance(layer_types, list) and i < len(layer_types) else None
            signatures.append((shapes, kind))
    period = None
    n = len(signatures)
    for p in range(1, n + 1):
        if n % p == 0 and all(signatures[i] == signatures[i % p] for i in range(n)):
            period = p
            break
    result = dict(params=params, layers=n, period=period if n else None,
                  params_dtype_bytes=torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 1)
    _STRUCTURE[key] = result
    return result


def count_params(config, dtype=torch.bfloat16) -> int:
    """Parameters of the whole model (built on the meta device: no memory)."""
    return structure(config, dtype)["params"]


_TRACES: dict = {}


def trace_rank(config, shape: Shape, *, draft: bool = False, progress=None) -> RankTrace:
    """One rank's ops for `shape`, split into the outside ops and one period of layers (or, for
    a model whose layers do not repeat, every layer as the outside ops). Cached per config and
    shape."""
    key = (_config_key(config), shape, draft)
    if key in _TRACES:
        return _TRACES[key]
    dtype = getattr(torch, shape.dtype)
    info = structure(config, dtype)
    layers, period = info["layers"], info["period"]
    if layers and period and layers >= 2 * period:
        if progress:
            progress(f"tracing {period} and {2 * period} layer(s) at tp={shape.tp}"
                     + (f", ep={shape.ep}" if shape.ep > 1 else "") + f" ({shape.phase})")
        one = _trace(_with_layers(config, period), shape, draft)
        two = _trace(_with_layers(config, 2 * period), shape, draft)
        outside, per = _C._estimate_split_layers(one["trace"], two["trace"])
        facts = {k: 2 * one[k] - two[k] for k in _FACTS}
        facts.update({"period_" + k: two[k] - one[k] for k in _FACTS})
        result = RankTrace(outside=outside, period=per, layers_per_period=period,
                           periods=layers // period, facts=facts,
                           ops=len(one["trace"]) + len(two["trace"]),
                           sources=one["sources"] + two["sources"],
                           unmodelled=one["unmodelled"], notes=one["notes"], shard=one["shard"])
    else:
        if progress:
            progress(f"tracing all {layers} layers (they do not repeat) at tp={shape.tp}")
        whole = _trace(config, shape, draft)
        empty = _C._EstimateTrace()
        facts = {k: whole[k] for k in _FACTS}
        facts.update({"period_" + k: 0.0 for k in _FACTS})
        result = RankTrace(outside=whole["trace"], period=empty, layers_per_period=max(layers, 1),
                           periods=1, facts=facts, ops=len(whole["trace"]),
                           sources=whole["sources"], unmodelled=whole["unmodelled"],
                           notes=whole["notes"] + ["the layers are not alike: every layer traced"],
                           shard=whole["shard"])
    _TRACES[key] = result
    return result


# Facts one trace yields, per rank; split like the ops into outside and per-period shares.
_FACTS = ("params", "activation_bytes", "attention_activation_bytes", "whole_activation_bytes",
          "kv_cache_bytes")


def _trace(config, shape: Shape, draft: bool) -> dict:
    dtype = getattr(torch, shape.dtype)
    trace = _C._EstimateTrace()
    recorder = _Recorder(trace)
    saved: dict = {}
    # The rank's config is its own (sharding sets its vocabulary to the rank's shard).
    config = copy.deepcopy(config)
    text = _text_config(config)
    if getattr(text, "num_experts", None) or getattr(text, "n_routed_experts", None):
        # Static shapes under fake tensors: grouped matmuls over the routed tokens.
        config._experts_implementation = "grouped_mm"
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = _build(config, dtype)
        # A draft model's collectives run over its own tensor-parallel group.
        on_collective = recorder.collective if not draft else (
            lambda kind, group, t, where: recorder.collective(kind, "d" + group, t, where))
        report = _shard.shard_model(
            model, tp=shape.tp, ep=shape.ep, expert_tp=shape.expert_tp,
            on_collective=on_collective, expert_rows_scale=shape.expert_rows_scale)
        params = sum(p.numel() for p in model.parameters())
        recorder.weights = frozenset(_storage_key(p) for p in model.parameters())
        _shard._NoRecord.active = recorder
        kv_cache_bytes = 0.0
        try:
            if shape.phase == "train":
                model.train()
                ids = torch.zeros(shape.batch, shape.seq_len, dtype=torch.long, device="neuron")
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

                hidden = getattr(_text_config(config), "hidden_size", 0) or 0
                recorder.full_width = shape.batch * shape.seq_len * hidden

                def pack(t):
                    k = _storage_key(t)
                    if k not in recorder.weights and k not in saved:
                        storage = t.untyped_storage()
                        saved[k] = (storage.nbytes(),
                                    storage.nbytes() == recorder.full_width * t.element_size(), storage)
                    return t

                with recorder:
                    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                        loss = model(input_ids=ids, labels=ids).loss
                    recorder.phase = "backward"
                    loss.backward()
                    # The first step creates the optimizer state (zeros): not a per-step cost.
                    recorder.recording = False
                    optimizer.step()
                    recorder.recording = True
                    recorder.phase = "optimizer"
                    optimizer.step()
            else:
                kv_cache_bytes = _inference_step(model, config, shape, report, recorder, draft)
        except ShardError:
            raise
        except RuntimeError as error:
            raise ShardError(
                f"{type(model).__name__} does not run with its parameters sharded at tp={shape.tp}"
                + (f", ep={shape.ep}" if shape.ep > 1 else "")
                + f" ({str(error).splitlines()[0]}); use another degree") from error
        finally:
            _shard._NoRecord.active = None
    activation = float(sum(v for v, _, _ in saved.values()))
    attention = float(sum(v for k, (v, _, _) in saved.items() if k in recorder.attention))
    whole = float(sum(v for v, w, _ in saved.values() if w))
    return dict(trace=trace, params=float(params), activation_bytes=activation,
                attention_activation_bytes=attention, whole_activation_bytes=whole,
                kv_cache_bytes=kv_cache_bytes,
                sources=recorder.sources, unmodelled=recorder.unmodelled,
                notes=list(report.notes), shard=report)


def _inference_step(model, config, shape: Shape, report, recorder, draft: bool) -> float:
    """Trace one prefill or decode step over a static KV cache; returns the cache's bytes."""
    from transformers import StaticCache

    text = _text_config(config)
    cache_config = copy.deepcopy(text)
    heads = getattr(text, "num_attention_heads", None)
    if heads and getattr(cache_config, "head_dim", None) is None and getattr(text, "hidden_size", None):
        cache_config.head_dim = text.hidden_size // heads
    if report.kv_heads_per_rank is not None:
        cache_config.num_key_value_heads = report.kv_heads_per_rank
    model.eval()
    prefill = shape.phase == "prefill"
    if prefill:
        recorder.full_width = shape.batch * shape.seq_len * (getattr(text, "hidden_size", 0) or 0)
    length = shape.seq_len if prefill else shape.context
    cache = StaticCache(config=cache_config, max_cache_len=length)
    phase = ("draft" if draft else shape.phase)
    with torch.no_grad():
        # The first step allocates the cache (lazily, on its first update): not traced.
        recorder.recording = False
        with recorder:
            model(input_ids=torch.zeros(shape.batch, 1, dtype=torch.long, device="neuron"),
                  past_key_values=cache, use_cache=True,
                  cache_position=torch.tensor([0], device="neuron"))
        recorder.recording = True
        recorder.phase = phase
        q = shape.seq_len if prefill else shape.query
        start = 0 if prefill else max(0, shape.context - q)
        with recorder:
            model(input_ids=torch.zeros(shape.batch, q, dtype=torch.long, device="neuron"),
                  past_key_values=cache, use_cache=True,
                  cache_position=torch.arange(start, start + q, device="neuron"))
    total = 0.0
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def layer_input_bytes(config, shape: Shape, layers: int, sequence_parallel: bool) -> float:
    """What full recompute keeps per micro-batch on one rank: each layer's input (1/tp of it
    under sequence parallelism, as Megatron and NxD hold it)."""
    hidden = getattr(_text_config(config), "hidden_size", 0) or 0
    elem = torch.finfo(getattr(torch, shape.dtype)).bits // 8
    per_layer = shape.batch * shape.seq_len * hidden * elem
    return layers * per_layer / (shape.tp if sequence_parallel and shape.tp > 1 else 1)


def kv_width(config, shape: Shape) -> int:
    """Key/value heads x head_dim one tp rank holds: what context parallelism exchanges per token
    and layer, for keys and for values."""
    text = _text_config(config)
    heads = getattr(text, "num_attention_heads", None) or 0
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or (getattr(text, "hidden_size", 0) // heads if heads else 0)
    per_rank = max(1, kv_heads // shape.tp) if shape.tp > 1 else kv_heads
    return int(per_rank * (head_dim or 0))


def clear_cache() -> None:
    _TRACES.clear()
    _STRUCTURE.clear()
