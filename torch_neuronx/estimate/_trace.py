"""Tracing one rank of a model at full size without its memory.

The model is built from its config under FakeTensorMode on the ``neuron`` device (shapes and
dtypes, no storage), sharded as one rank of the layout holds it (tensor parallelism divides heads,
intermediate sizes and the vocabulary; pipeline parallelism keeps a stage's layers), and one
training step or one decode step runs under a dispatch mode that hands every ATen op to the
native bridge (csrc/backend/estimate): the op's work comes from the same FLOP models and cost
builder the eager kernels use, so a traced op is what its launch record would be.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch._decomp import decomposition_table
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from torch_neuronx import _C, _op_work

# Ops that touch no device memory: no launch, no record.
_NO_WORK = {
    "aten::empty.memory_format", "aten::empty_strided", "aten::empty_like", "aten::resize_",
    "aten::set_", "aten::lift_fresh", "aten::detach", "aten::alias", "aten::_local_scalar_dense",
    "aten::_unsafe_view",
}
# Ops the bridge models itself although neuron runs them as composites: copies (the DMA engines)
# and factories (one fill).
_MODELLED_COMPOSITES = {
    "aten::_to_copy", "aten::clone", "aten::copy_", "aten::zeros", "aten::ones", "aten::full",
    "aten::zeros_like", "aten::ones_like", "aten::full_like", "aten::new_zeros", "aten::new_ones",
    "aten::new_full", "aten::scalar_tensor",
}


def _returns_alias(func) -> bool:
    # A view (or an alias of an argument) moves no data.
    for ret in func._schema.returns:
        info = ret.alias_info
        if info is not None and not info.is_write:
            return True
    return False


def _has_kernel(func, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)


def _wrapped_numbers(func, args) -> tuple:
    # A Python number where the schema wants a Tensor is a wrapped scalar (x + 0): a 0-d tensor.
    out = list(args)
    for i, (arg, value) in enumerate(zip(func._schema.arguments, args)):
        if isinstance(value, (bool, int, float)) and str(arg.type) == "Tensor":
            out[i] = torch.tensor(value)
    return tuple(out)


class _Recorder(TorchDispatchMode):
    def __init__(self, trace):
        super().__init__()
        self.trace = trace
        self.phase = "forward"
        self.recording = True
        self.sources = Counter()
        self.unmodelled = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if (not self.recording or name.startswith(("prim::", "profiler::")) or name in _NO_WORK
                or _returns_alias(func)):
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
        out = func(*args, **kwargs)
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        source = self.trace.record(func, _wrapped_numbers(func, args), dict(kwargs), outputs,
                                   self.phase)
        self.sources[source] += 1
        if source == "default":
            self.unmodelled[name] += 1
        return out


@dataclass
class RankTrace:
    """One rank's ops and the facts the cost model needs."""

    trace: object  # _C._EstimateTrace
    facts: dict
    ops: int
    sources: Counter
    unmodelled: Counter
    config: object  # the rank's (sharded) config
    notes: list = field(default_factory=list)


def _divide(config, name: str, tp: int, notes: list, replicate_below: bool = False):
    value = getattr(config, name, None)
    if value is None or tp == 1:
        return
    if replicate_below and value < tp:
        # Fewer key/value heads than ranks: each rank keeps one (replicated), as NxD does.
        setattr(config, name, 1)
        notes.append(f"{name}={value} < tp={tp}: one replicated head per rank")
        return
    if value % tp != 0:
        raise ValueError(
            f"tensor parallelism tp={tp} does not divide {name}={value}; choose a tp that does"
        )
    setattr(config, name, value // tp)


def shard_config(config, tp: int, pp: int):
    """The config of one rank: heads, intermediate sizes and vocabulary divided by tp, the layers
    of one pipeline stage."""
    rank = copy.deepcopy(config)
    notes: list[str] = []
    heads = getattr(rank, "num_attention_heads", None)
    hidden = getattr(rank, "hidden_size", None)
    if tp > 1 and (heads is None or hidden is None):
        raise ValueError(
            f"tensor parallelism needs num_attention_heads and hidden_size in the config "
            f"({type(config).__name__} has neither); use tp=1"
        )
    if heads is not None and hidden is not None and getattr(rank, "head_dim", None) is None:
        rank.head_dim = hidden // heads  # kept when the heads are divided
    _divide(rank, "num_attention_heads", tp, notes)
    _divide(rank, "num_key_value_heads", tp, notes, replicate_below=True)
    _divide(rank, "intermediate_size", tp, notes)
    _divide(rank, "moe_intermediate_size", tp, notes)
    if tp > 1 and getattr(rank, "vocab_size", None):
        # A vocabulary-parallel embedding and LM head: each rank holds 1/tp of the rows.
        rank.vocab_size = math.ceil(rank.vocab_size / tp)
    layers = getattr(rank, "num_hidden_layers", None)
    if pp > 1:
        if layers is None:
            raise ValueError("pipeline parallelism needs num_hidden_layers in the config; use pp=1")
        rank.num_hidden_layers = math.ceil(layers / pp)
        notes.append(
            "each pipeline stage is traced with the embedding and the LM head (they live on the "
            "first and last stage only): a small overcount for pp > 1"
        )
    if getattr(rank, "num_experts", None):
        # Static shapes under fake tensors: grouped matmuls over the routed tokens.
        rank._experts_implementation = "grouped_mm"
    return rank, notes


def _build(config, dtype):
    from transformers import AutoModelForCausalLM

    with torch.device("neuron"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model


def _storage_key(t: torch.Tensor):
    try:
        return t.untyped_storage()._cdata
    except Exception:
        return id(t)


def trace_rank(config, *, training: bool, batch: int, seq_len: int, context: int, tp: int,
               pp: int, dtype: torch.dtype = torch.bfloat16) -> RankTrace:
    """Trace one rank: a training step (forward, backward, AdamW) on [batch, seq_len] tokens, or
    one decode step of [batch, 1] new tokens over a KV cache of `context` positions."""
    rank_config, notes = shard_config(config, tp, pp)
    trace = _C._EstimateTrace()
    recorder = _Recorder(trace)
    saved: dict = {}
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = _build(rank_config, dtype)
        params_per_rank = sum(p.numel() for p in model.parameters())
        elem = torch.finfo(dtype).bits // 8
        kv_cache_bytes = 0.0
        if training:
            model.train()
            ids = torch.zeros(batch, seq_len, dtype=torch.long, device="neuron")
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

            def pack(t):
                saved.setdefault(_storage_key(t), t.untyped_storage().nbytes())
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
            from transformers import StaticCache

            model.eval()
            cache = StaticCache(config=rank_config, max_cache_len=context)
            ids = torch.zeros(batch, 1, dtype=torch.long, device="neuron")
            with torch.no_grad():
                # The first step allocates the cache; the traced one is a steady-state step.
                model(input_ids=ids, past_key_values=cache, use_cache=True,
                      cache_position=torch.tensor([0], device="neuron"))
                recorder.phase = "decode"
                with recorder:
                    model(input_ids=ids, past_key_values=cache, use_cache=True,
                          cache_position=torch.tensor([context - 1], device="neuron"))
            layers = getattr(rank_config, "num_hidden_layers", 0)
            kv_heads = getattr(rank_config, "num_key_value_heads", None) or getattr(
                rank_config, "num_attention_heads", 0)
            head_dim = getattr(rank_config, "head_dim", 0) or 0
            kv_cache_bytes = 2.0 * layers * batch * kv_heads * context * head_dim * elem
    facts = dict(
        layers=int(getattr(config, "num_hidden_layers", 0) or 0),
        hidden=int(getattr(config, "hidden_size", 0) or 0),
        params_per_rank=float(params_per_rank),
        param_bytes=elem,
        activation_bytes=elem,
        kv_cache_bytes_per_rank=kv_cache_bytes,
        activation_bytes_per_rank=float(sum(saved.values())),
        kv_width=float(_kv_width(rank_config)),
    )
    return RankTrace(trace=trace, facts=facts, ops=len(trace), sources=recorder.sources,
                     unmodelled=recorder.unmodelled, config=rank_config, notes=notes)


def _kv_width(config) -> int:
    """Key/value heads x head_dim of one (tp-sharded) rank: what context parallelism exchanges
    per token and layer, for keys and for values."""
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or (
        getattr(config, "hidden_size", 0) // heads if heads else 0)
    return int((kv_heads or 0) * (head_dim or 0))


def count_params(config, dtype=torch.bfloat16) -> int:
    """Parameters of the whole model (built under fake tensors: no memory)."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = _build(config, dtype)
        return sum(p.numel() for p in model.parameters())
