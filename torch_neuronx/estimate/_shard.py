"""One rank's share of a model: its parameters sharded by the model's own parallel plans.

Tensor parallelism follows the plan transformers ships with the architecture
(``config.base_model_tp_plan``: which projection is split by columns, which by rows, which
output is gathered) and expert parallelism its ``base_model_ep_plan``. A rank's model is the
full-width model whose planned parameters are replaced by their local shards; transformers
writes its attention and MLP code for exactly that (head counts are inferred from the local
projection widths), so the traced rank runs the code a tensor-parallel rank runs.

Three rules go beyond the plans, each as Megatron-LM and NxD do it:
- the embedding and the LM head are vocabulary-parallel (1/tp of the rows each), and the loss
  is computed over the local vocabulary shard (no gather of the logits);
- when there are fewer key/value heads than ranks, each rank keeps one key/value head
  (replicated), as NxD does; transformers' own plan cannot shard such a model;
- an architecture with no plan is refused for tp > 1 (naming it), never sharded by guesswork.

The collectives a plan implies are recorded where they happen, with the bytes of the tensor
they move: a row-parallel output is all-reduced, a gathered column-parallel output is
all-gathered, the expert dispatch and combine of expert parallelism are all-to-alls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch


class ShardError(ValueError):
    """A layout this model cannot be sharded into; the message names the nearest one that works."""


@dataclass(frozen=True)
class Style:
    # Dimension of a weight (counted from the end) and of a 1-D parameter that is split; None:
    # replicated.
    weight_dim: int | None
    bias_dim: int | None
    # The collective the style implies on the module's output in the forward.
    collective: str | None = None


# transformers' style names (transformers/distributed/tensor_parallel.py) and what they mean
# for one rank. A style not listed here is refused by name.
STYLES = {
    "colwise": Style(-2, -1),
    "colwise_rep": Style(-2, -1, "all_gather"),
    "colwise_gather_output": Style(-2, -1, "all_gather"),
    "rowwise": Style(-1, None, "all_reduce"),
    "rowwise_rep": Style(-1, None, "all_reduce"),
    "rowwise_split_input": Style(-1, None, "all_reduce"),
    "packed_colwise": Style(-2, -1),
    "packed_rowwise": Style(-1, None),
    "embedding_rowwise": Style(-2, None, "all_reduce"),
    "embedding_colwise": Style(-1, None, "all_gather"),
    "all_reduce": Style(None, None, "all_reduce"),
    "moe_tp_experts": Style(None, None, "all_reduce"),
    "replicated_with_grad_allreduce": Style(None, None),
    "replicate": Style(None, None),
    "local_params": Style(None, None),
    "sequence_parallel": Style(None, None),
    "moe_identity_expert": Style(None, None),
}
EP_STYLES = {
    "grouped_gemm": Style(-3, None),          # experts along dim 0 of [E, ...]
    "ep_dispatch_experts": Style(None, None, "all_to_all"),
}

_KEY_PROJECTIONS = ("k_proj", "v_proj")
_FUSED_KEY_PROJECTIONS = ("qkv_proj", "query_key_value", "c_attn")


@dataclass
class Collective:
    kind: str       # "all_reduce", "all_gather", "all_to_all"
    group: str      # "tp" (the attention / dense group) or "ep"
    where: str      # the module (with its layer number replaced by *)


@dataclass
class ShardReport:
    tp: int
    ep: int
    expert_tp: int
    layer_params_full: int = 0
    layer_params_rank: int = 0
    replicated: list = field(default_factory=list)   # unplanned 2-D parameters of a layer
    notes: list = field(default_factory=list)
    kv_heads_per_rank: int | None = None

    @property
    def shrink(self) -> float:
        return self.layer_params_full / max(self.layer_params_rank, 1)


def _pattern(key: str) -> re.Pattern:
    return re.compile("^" + re.escape(key).replace(r"\*", r"\d+") + "$")


def decoder_layers(model):
    """The ModuleList of the decoder layers (the one as long as num_hidden_layers)."""
    config = model.config.get_text_config()
    n = getattr(config, "num_hidden_layers", None)
    best = None
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            if best is None or name.count(".") < best[0].count("."):
                best = (name, module)
    return best


def _nearest(value: int, degree: int, also: int | None = None) -> int:
    """The degree that divides `value` (and `also`) nearest below `degree` (a smaller split is
    the one more likely to fit the same instance), else the smallest above it."""
    fits = [d for d in range(1, value + 1) if value % d == 0 and (also is None or also % d == 0)]
    below = [d for d in fits if d <= degree]
    return max(below) if below else min(fits, default=1)


def _replace(module: torch.nn.Module, name: str, shape, *, param: bool = True) -> None:
    old = getattr(module, name)
    new = torch.empty(shape, dtype=old.dtype, device=old.device)
    if param:
        setattr(module, name, torch.nn.Parameter(new, requires_grad=old.requires_grad))
    else:
        setattr(module, name, new)


def _split(module, pname: str, dim: int, parts: int, where: str) -> None:
    p = getattr(module, pname)
    d = dim % p.dim()
    size = p.shape[d]
    if size % parts != 0:
        raise ShardError(
            f"{where}.{pname} has {size} along the dimension its plan splits, which "
            f"{parts} ranks do not divide; use a degree that divides {size} "
            f"(nearest: {_nearest(size, parts)})")
    shape = list(p.shape)
    shape[d] = size // parts
    _replace(module, pname, shape)


def plans(model, tp: int, ep: int):
    """(tp plan, ep plan) of the model as {full parameter-or-module name pattern: style}."""
    config = model.config.get_text_config()
    prefix = getattr(model, "base_model_prefix", "model")
    if not hasattr(model, prefix):
        prefix = ""
    def full(plan):
        return {(f"{prefix}.{k}" if prefix else k): v for k, v in (plan or {}).items()}
    tp_plan = full(getattr(config, "base_model_tp_plan", None)) if tp > 1 else {}
    ep_plan = full(getattr(config, "base_model_ep_plan", None)) if ep > 1 else {}
    if tp > 1 and not tp_plan:
        raise ShardError(
            f"{type(model).__name__} (model_type {config.model_type!r}) has no tensor-parallel "
            "plan in transformers (config.base_model_tp_plan), so there is no sound way to split "
            "its layers; use tp=1 (with dp for more devices), or an architecture whose config "
            "has a plan")
    if ep > 1 and not ep_plan:
        raise ShardError(
            f"{type(model).__name__} (model_type {config.model_type!r}) has no expert-parallel "
            "plan (config.base_model_ep_plan): it has no experts to distribute; use ep=1")
    for plan, known in ((tp_plan, STYLES), (ep_plan, EP_STYLES)):
        for key, style in plan.items():
            if style not in known:
                raise ShardError(
                    f"the plan of {config.model_type!r} shards {key} as {style!r}, a style this "
                    f"estimate does not model (it knows {sorted(known)}); use tp=1/ep=1")
    return tp_plan, ep_plan


def shard_model(model, *, tp: int, ep: int = 1, expert_tp: int | None = None,
                on_collective=None, expert_rows_scale: float = 1.0) -> ShardReport:
    """Replace the parameters of `model` (built under fake tensors) by one rank's shards.

    tp: ranks sharing the attention and dense layers; ep: ranks the experts are spread over;
    expert_tp: ranks sharing one expert (by default tp). on_collective(kind, group, tensor,
    where) is called in the forward for each collective the plans imply. expert_rows_scale:
    the routed rows one rank's experts process, relative to its own tokens x top-k (the
    number of different token sets in the expert group over ep).
    """
    expert_tp = tp if expert_tp is None else expert_tp
    config = model.config.get_text_config()
    report = ShardReport(tp=tp, ep=ep, expert_tp=expert_tp)
    tp_plan, ep_plan = plans(model, tp, ep)
    modules = dict(model.named_modules())
    found = decoder_layers(model)
    layer0 = found[0] + ".0" if found else None
    if layer0:
        report.layer_params_full = sum(p.numel() for p in modules[layer0].parameters())

    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or (
        config.hidden_size // heads if heads and getattr(config, "hidden_size", None) else None)

    def is_expert(name: str) -> bool:
        return ".experts" in name

    # Which styles apply to each module and parameter: a parameter may be split by both plans
    # (experts: over ep by the expert plan, and over the expert tp group by the tp plan).
    module_styles: dict[str, list] = {}   # name -> [(style, plan, key), ...]
    param_styles: dict[str, list] = {}
    names = [n for n, _ in model.named_parameters()]
    for plan_name, plan in (("tp", tp_plan), ("ep", ep_plan)):
        for key, style in plan.items():
            pat = _pattern(key)
            for name in modules:
                if pat.match(name):
                    module_styles.setdefault(name, []).append((style, plan_name, key))
            for name in names:
                if pat.match(name):
                    param_styles.setdefault(name, []).append((style, plan_name, key))

    kv_replicated = False
    if tp > 1 and heads:
        attention_tp = tp
        if heads % attention_tp != 0:
            raise ShardError(
                f"tensor parallelism tp={attention_tp} does not divide num_attention_heads={heads}; "
                f"use a tp that does (nearest: {_nearest(heads, attention_tp)})")
        keys_sharded = any(n.rsplit(".", 1)[-1] in _KEY_PROJECTIONS + _FUSED_KEY_PROJECTIONS
                           and any(e[0] == "colwise" for e in s) for n, s in module_styles.items())
        if keys_sharded and kv_heads % attention_tp != 0:
            fused = any(n.rsplit(".", 1)[-1] in _FUSED_KEY_PROJECTIONS for n in module_styles)
            if attention_tp % kv_heads != 0 or fused:
                raise ShardError(
                    f"tp={attention_tp} neither divides num_key_value_heads={kv_heads} nor is a "
                    f"multiple of it; use tp={_nearest(kv_heads, attention_tp)} or a multiple of "
                    f"{kv_heads}")
            kv_replicated = True
            report.notes.append(
                f"num_key_value_heads={kv_heads} < tp={attention_tp}: each rank keeps one key/value "
                "head (replicated, as NxD does)")
        report.kv_heads_per_rank = 1 if kv_replicated else (
            kv_heads // attention_tp if keys_sharded else kv_heads)

    experts = [modules[n] for n, entries in module_styles.items()
               if any(e[0] == "ep_dispatch_experts" for e in entries)] if ep > 1 else []
    for module in experts:
        count = getattr(module, "num_experts", 0)
        if count % ep != 0:
            raise ShardError(
                f"expert parallelism ep={ep} does not divide the {count} experts of "
                f"{type(module).__name__}; use an ep that does (nearest: "
                f"{_nearest(count, ep, also=ep * expert_tp)})")

    def degree(name: str, plan_name: str) -> int:
        if plan_name == "ep":
            return ep
        return expert_tp if is_expert(name) else tp

    # Parameters: shard each by its own entries, or else by its module's.
    for pname, param in list(model.named_parameters()):
        module_name, _, leaf = pname.rpartition(".")
        module = modules[module_name]
        entries = param_styles.get(pname) or (
            module_styles.get(module_name, []))
        for style_name, plan_name, key in entries:
            style = (EP_STYLES if plan_name == "ep" else STYLES)[style_name]
            parts = degree(pname, plan_name)
            p = getattr(module, leaf)
            dim = style.weight_dim if p.dim() >= 2 else style.bias_dim
            if parts == 1 or dim is None:
                continue
            if (kv_replicated and style_name == "colwise"
                    and module_name.rsplit(".", 1)[-1] in _KEY_PROJECTIONS):
                shape = list(p.shape)
                shape[dim % p.dim()] = head_dim
                _replace(module, leaf, shape)
                continue
            _split(module, leaf, dim, parts, module_name)

    # Attention modules whose key/value heads were replicated repeat them for their local
    # query heads only.
    if kv_replicated:
        for name, module in modules.items():
            if any(f"{name}.{k}" in modules for k in _KEY_PROJECTIONS) and hasattr(
                    module, "num_key_value_groups"):
                module.num_key_value_groups = heads // tp
    # Experts: their count per rank.
    for module in experts:
        module.num_experts //= ep

    _vocab_parallel(model, tp, report)

    if layer0:
        layer = modules[layer0]
        report.layer_params_rank = sum(p.numel() for p in layer.parameters())
        for pname, p in layer.named_parameters():
            full = f"{layer0}.{pname}"
            if p.dim() >= 2 and full not in param_styles and full.rpartition(".")[0] not in module_styles:
                report.replicated.append(re.sub(r"\.\d+\.", ".*.", full))
        if (tp > 1 or ep > 1) and report.replicated:
            report.notes.append(
                "not in the model's parallel plan, so replicated on every rank (as transformers' "
                "own tensor parallelism runs them): " + ", ".join(report.replicated))

    if on_collective is not None:
        _hook_collectives(model, module_styles, tp, ep, expert_tp, on_collective, expert_rows_scale)
    elif ep > 1 and expert_rows_scale != 1.0:
        raise ValueError("expert_rows_scale needs on_collective (the hooks that rescale the rows)")
    return report


def _vocab_parallel(model, tp: int, report: ShardReport) -> None:
    if tp == 1:
        return
    inputs = model.get_input_embeddings()
    outputs = model.get_output_embeddings()
    tied = inputs is not None and outputs is not None and outputs.weight is inputs.weight
    for module in (inputs, outputs):
        if module is None or (module is outputs and tied):
            continue
        w = module.weight
        rows = -(-w.shape[0] // tp)  # a padded last shard, as Megatron pads the vocabulary
        _replace(module, "weight", (rows, *w.shape[1:]))
        if getattr(module, "bias", None) is not None and module.bias.shape[0] == w.shape[0]:
            _replace(module, "bias", (rows,))
    if tied:
        outputs.weight = inputs.weight
    # The loss views the logits by the configured vocabulary: a rank's is its shard.
    rows = (inputs or outputs).weight.shape[0]
    for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        if getattr(config, "vocab_size", None):
            config.vocab_size = rows
    for module in model.modules():
        if isinstance(getattr(module, "vocab_size", None), int):
            module.vocab_size = rows


def _hook_collectives(model, module_styles, tp, ep, expert_tp, on_collective, expert_rows_scale):
    modules = dict(model.named_modules())
    for name, entries in module_styles.items():
        module = modules[name]
        where = re.sub(r"\.\d+(\.|$)", r".*\1", name)
        for style_name, plan_name, key in entries:
            style = (EP_STYLES if plan_name == "ep" else STYLES)[style_name]
            if style.collective is None:
                continue
            group = "ep" if plan_name == "ep" else ("etp" if ".experts" in name else "tp")
            size = {"tp": tp, "etp": expert_tp, "ep": ep}[group]
            if size == 1:
                continue
            if style.collective == "all_to_all":
                module.register_forward_pre_hook(
                    _dispatch_hook(on_collective, where, expert_rows_scale), with_kwargs=True)
                module.register_forward_hook(_combine_hook(on_collective, where), with_kwargs=True)
                continue

            def hook(mod, args, output, kind=style.collective, where=where, group=group):
                out = output[0] if isinstance(output, tuple) else output
                if isinstance(out, torch.Tensor):
                    on_collective(kind, group, out, where)
            module.register_forward_hook(hook)
    # The LM head's vocabulary-parallel logits feed a vocabulary-parallel loss or sampling:
    # a few scalars per token are exchanged, not the logits (negligible, not modelled).


def _dispatch_hook(on_collective, where, scale):
    def pre(module, args, kwargs):
        hidden, index, weights = args[0], args[1], args[2]
        tokens, k = index.shape[0], index.shape[-1]
        rows = max(1, round(tokens * k * scale))
        module._estimate_tokens = hidden.shape
        if rows != tokens * k:
            with _no_record():
                if rows % k == 0 and rows // k <= tokens:
                    n = rows // k
                    hidden, index, weights = hidden[:n], index[:n], weights[:n]
                else:
                    hidden = hidden[:1].expand(rows, hidden.shape[-1])
                    index = index[:1, :1].expand(rows, 1)
                    weights = weights[:1, :1].expand(rows, 1)
        # Each routed row travels to the rank holding its expert.
        on_collective("all_to_all", "ep", _Rows(rows, hidden), where + " dispatch")
        return (hidden, index, weights, *args[3:]), kwargs
    return pre


def _combine_hook(on_collective, where):
    def post(module, args, kwargs, output):
        rows = args[1].shape[0] * args[1].shape[-1]
        on_collective("all_to_all", "ep", _Rows(rows, output), where + " combine")
        shape = module._estimate_tokens
        if tuple(output.shape) != tuple(shape):
            with _no_record():
                if output.shape[0] < shape[0]:
                    output = torch.nn.functional.pad(output, (0, 0, 0, shape[0] - output.shape[0]))
                else:
                    output = output[: shape[0]]
        return output
    return post


class _Rows:
    """A stand-in for the rows an all-to-all moves: rows x hidden of the tensor's dtype."""

    def __init__(self, rows: int, like: torch.Tensor):
        self.nbytes = rows * like.shape[-1] * like.element_size()


class _NoRecord:
    active = None  # the recorder, set by the tracer

    def __enter__(self):
        self.rec = _NoRecord.active
        if self.rec is not None:
            self.was, self.rec.recording = self.rec.recording, False

    def __exit__(self, *exc):
        if self.rec is not None:
            self.rec.recording = self.was


def _no_record():
    return _NoRecord()
