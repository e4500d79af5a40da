"""One layout of one model on one instance: check it, trace (or reuse) the rank's ops, and hand
them to the cost model (csrc/runtime/cost) with the facts it needs; refuse what cannot run."""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field, replace

import torch

from torch_neuronx import _C, _env
from torch_neuronx.estimate._layout import Layout, Speculation
from torch_neuronx.estimate._models import load_config
from torch_neuronx.estimate._shard import ShardError
from torch_neuronx.estimate._trace import Shape, kv_width, layer_input_bytes, structure, trace_rank


WORKLOADS = ("train", "inference", "decode", "prefill")
WEIGHTS = ("bf16", "fp8", "int8")


class LayoutError(ValueError):
    """A layout this model cannot run in on this instance; the message names the problem and the
    nearest layout that works."""


def data_paths(data: str | None = None) -> tuple[str, str]:
    """(estimate data file, engine model file): --data / TORCH_NEURONX_ESTIMATE_DATA or the shipped
    estimate.ini; NRTSIM_ENGINE_MODEL or the shipped neuron_cores.ini."""
    estimate_data = (data or _env.path("TORCH_NEURONX_ESTIMATE_DATA")
                     or _env.data_file("estimate.ini"))
    # The runtime's answer: NRTSIM_ENGINE_MODEL is the runtime's variable (csrc/runtime/Env).
    return estimate_data, _C._engine_model_path()


@dataclass(frozen=True)
class Workload:
    """What one projection runs. train: one optimizer step of `microbatches` micro-batches of
    `batch` sequences of `seq_len` tokens per replica. inference: requests of `prompt` input
    and `output` generated tokens, `batch` decoded together per model replica (prefill one
    request at a time, as NxD Inference's context encoding does by default); decode / prefill:
    that one phase alone (decode over a KV cache of `context` positions)."""

    kind: str = "train"
    batch: int = 1
    seq_len: int = 2048
    prompt: int = 2048
    output: int = 256
    context: int = 0          # decode: KV positions (default: the prompt plus half the output)
    dtype: str = "bfloat16"
    compiled: bool = True
    fp8: bool = False         # training: 16-bit matmuls at the FP8 rate
    weights: str = "bf16"     # inference: weights stored as bf16, fp8 (FP8 matmuls) or int8
    speculation: Speculation | None = None
    async_host: bool = True   # inference: the host loop overlaps the device
    kv_cache: str = "bf16"    # inference: KV cache stored as bf16 or fp8
    prefill_batch: int = 1    # inference: requests prefilled together (static batching: batch)
    # inference: (max context length, sequence length) of a bucketed deployment (NxD Inference's
    # --enable-bucketing): the prompt runs padded to its context-encoding bucket and each decode
    # step attends over its token-generation bucket's positions. (): exact lengths.
    buckets: tuple = ()

    def __post_init__(self):
        if self.kind not in WORKLOADS:
            raise ValueError(f"workload={self.kind!r}: use one of {WORKLOADS}")
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights={self.weights!r}: use one of {WEIGHTS}")
        if self.kv_cache not in ("bf16", "fp8"):
            raise ValueError(f"kv_cache={self.kv_cache!r}: use bf16 or fp8")
        if self.prefill_batch < 1 or self.batch % self.prefill_batch:
            raise ValueError(f"prefill_batch={self.prefill_batch} must divide batch={self.batch}")
        for name in ("batch", "seq_len", "prompt", "output"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if self.kind == "train" and (self.weights != "bf16" or self.speculation is not None):
            raise ValueError("quantized weights and speculative decoding are inference settings")
        if self.buckets:
            if self.kind == "train" or len(self.buckets) != 2:
                raise ValueError("buckets=(max context length, sequence length) is an inference "
                                 "setting of two lengths")
            max_context, seq_len = self.buckets
            # The last KV position a decode step attends over (a prefill alone has none).
            last = 0 if self.kind == "prefill" else self.context or self.prompt + self.output
            if self.prompt > max_context or last > seq_len:
                raise ValueError(f"buckets={self.buckets}: the prompt ({self.prompt}) must fit the "
                                 f"max context length and the KV positions ({last}) the sequence "
                                 "length; raise them")

    @property
    def training(self) -> bool:
        return self.kind == "train"

    @property
    def decode_context(self) -> int:
        return self.context or self.prompt + max(1, self.output // 2)

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens one prefill computes: the prompt, or its context-encoding bucket."""
        return bucket_for(self.prompt, self.buckets[0]) if self.buckets else self.prompt

    @property
    def decode_positions(self) -> int:
        """KV positions a decode step attends over: the context, or its token-generation bucket.
        Over a whole request (no `context` given) the attention's work grows with the positions,
        so a step is charged their mean over the request's steps, as the unbucketed midpoint is;
        with buckets, the mean of each step's bucket (a request that crosses from the 4,096 to
        the 8,192 bucket spends part of its steps in each), not the bucket of the midpoint."""
        if not self.buckets:
            return self.decode_context
        if self.context or self.kind != "inference":
            return bucket_for(self.decode_context, self.buckets[1])
        sizes = auto_buckets(self.buckets[1])
        # Decode step k (1 .. output-1) attends over the prompt and the k tokens generated so far.
        first, last = self.prompt + 1, self.prompt + max(1, self.output - 1)
        total, lo = 0, first
        for size in sizes:
            if size < lo:
                continue
            hi = min(size, last)
            total += (hi - lo + 1) * size
            lo = hi + 1
            if lo > last:
                break
        return round(total / (last - first + 1))


def auto_buckets(max_length: int, min_length: int = 128) -> list[int]:
    """NxD Inference's automatic buckets (its autobucketing module): powers of two from
    `min_length` up to, not including, the one nearest `max_length`, then `max_length` itself."""
    if max_length <= min_length:
        return [max_length]
    top = round(math.log2(max_length))
    return [2 ** i for i in range(int(math.log2(min_length)), top)] + [max_length]


def bucket_for(length: int, max_length: int) -> int:
    """The smallest automatic bucket that holds `length` tokens (a compiled program per bucket:
    shorter inputs are padded to it)."""
    return next(b for b in auto_buckets(max_length) if b >= length)


@dataclass
class Result:
    """One layout's projection on one instance."""

    instance: str
    layout: Layout
    projection: dict                 # the step (train), or decode (inference / decode)
    prefill: dict | None = None      # inference: one request's prefill
    request: dict | None = None      # inference: TTFT, TPOT, throughput, $ per 1M output tokens
    trace_ops: int = 0
    unmodelled: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    fits: bool = True
    overcommitted: bool = False
    chosen: str = "given"            # how the layout was chosen (given, or by a search)
    batch: int = 0                   # the batch this layout was projected at

    @property
    def hbm_bytes(self) -> float:
        parts = [self.projection] + ([self.prefill] if self.prefill else [])
        return max(p["hbm_bytes_per_rank"] for p in parts)

    @property
    def capacity(self) -> float:
        return self.projection["hbm_capacity_per_rank"]


class Context:
    """A model and a workload, with the instance data: every layout projected from it shares
    its traces."""

    def __init__(self, model, workload: Workload, *, data: str | None = None,
                 prices: dict | None = None, progress=None):
        self.config = load_config(model)
        self.workload = workload
        self.data_path, self.engine_path = data_paths(data)
        self.known = _C._estimate_instances(self.data_path, self.engine_path)
        self.prices = dict(prices or {})
        self.progress = progress
        self.dtype = getattr(torch, workload.dtype)
        self._check_dtype()
        self.info = structure(self.config, self.dtype)
        self.params = self.info["params"]
        self.layers = self.info["layers"]
        self.draft = None
        if workload.speculation is not None:
            self.draft = load_config(workload.speculation.draft)
            self.draft_info = structure(self.draft, self.dtype)
        name = model if isinstance(model, str) else (
            getattr(self.config, "name_or_path", "") or type(self.config).__name__)
        self.name = os.path.basename(str(name)) or type(self.config).__name__

    def _check_dtype(self) -> None:
        text = self.config.get_text_config()
        experts = getattr(text, "num_experts", None) or getattr(text, "n_routed_experts", None)
        if experts and self.dtype == torch.float16:
            # The grouped expert matmul (torch._grouped_mm) takes bfloat16 or float32 only; a
            # float16 MoE deployment (NxD Inference's Qwen3-MoE cards use one) streams the same
            # bytes and runs its matmuls at the same rate as bfloat16, which is projected instead.
            self.dtype = torch.bfloat16
            self.dtype_note = ("float16 projected as bfloat16 (same bytes and Tensor-engine rate; "
                               "the grouped expert matmul has no float16 form to trace)")
        else:
            self.dtype_note = None

    def with_batch(self, batch: int) -> "Context":
        """The same model and instances at another batch (the traces are shared)."""
        if batch == self.workload.batch:
            return self
        other = copy.copy(self)
        other.workload = replace(self.workload, batch=batch)
        return other

    def check_instance(self, name: str) -> dict:
        if name not in self.known:
            raise ValueError(f"unknown instance {name!r}; the estimate data knows: {sorted(self.known)}")
        return self.known[name]

    # ------------------------------------------------------------------------------------------
    def check_layout(self, layout: Layout) -> None:
        """Refuse layouts the model cannot be split into, naming the nearest that works."""
        w = self.workload
        L = self.layers
        if layout.pp > 1:
            if not L:
                raise LayoutError("pipeline parallelism needs decoder layers; this model has none "
                                  "the estimate can find: use pp=1")
            if layout.pp > L or L % layout.pp != 0:
                near = max(d for d in range(1, min(layout.pp, L) + 1) if L % d == 0)
                raise LayoutError(
                    f"pp={layout.pp} does not divide the model's {L} layers into equal stages"
                    + (" (more stages than layers)" if layout.pp > L else "")
                    + f"; nearest that works: pp={near}")
        if w.training:
            if layout.adp > 1:
                raise LayoutError("adp (attention data parallelism) is an inference layout; use dp")
            if layout.ep > 1 and layout.dp % layout.ep != 0:
                raise LayoutError(f"ep={layout.ep} must divide dp={layout.dp} in training (experts "
                                  f"are spread over data-parallel replicas); e.g. dp={layout.ep * max(1, layout.dp // layout.ep)}")
            if w.seq_len % layout.cp != 0:
                raise LayoutError(f"cp={layout.cp} does not divide seq_len={w.seq_len}; nearest: "
                                  f"cp={max(d for d in range(1, layout.cp + 1) if w.seq_len % d == 0)}")
        else:
            if layout.recompute != "none" or layout.zero1 or layout.fsdp or layout.microbatches > 1:
                raise LayoutError("recompute, zero1, fsdp and micro-batches are training layouts")
            if layout.cp > 1:
                raise LayoutError("context parallelism is projected for training only; use cp=1")
            if layout.ep > 1 and layout.tp % layout.ep != 0:
                raise LayoutError(f"ep={layout.ep} must divide tp={layout.tp} in inference (the "
                                  "experts are spread over the ranks of a model replica)")
            if w.batch % layout.adp != 0:
                raise LayoutError(f"batch={w.batch} does not split over adp={layout.adp} attention "
                                  f"groups; use a batch that is a multiple of {layout.adp}")

    def draft_tp(self, layout: Layout) -> int:
        """The draft model's tensor parallelism: the target's attention tp, or the largest
        degree below it that divides the draft's heads (the rest of the ranks run replicas of
        it, as fused speculation keeps the draft on the target's ranks)."""
        tp = layout.tp // layout.adp
        text = self.draft.get_text_config()
        heads = getattr(text, "num_attention_heads", None) or 1
        kv = getattr(text, "num_key_value_heads", None) or heads
        for d in range(tp, 0, -1):
            if tp % d == 0 and heads % d == 0 and (kv % d == 0 or d % kv == 0):
                return d
        return 1

    def shape(self, layout: Layout, phase: str, *, draft: bool = False) -> Shape:
        w = self.workload
        if phase == "train":
            return Shape("train", tp=layout.tp, ep=layout.ep, expert_tp=layout.tp,
                         expert_rows_scale=1.0, batch=w.batch, seq_len=w.seq_len // layout.cp,
                         dtype=str(self.dtype).replace("torch.", ""))
        attention_tp = layout.tp // layout.adp
        ep = 1 if draft else layout.ep
        q = 1
        if phase == "decode" and w.speculation is not None and not draft:
            q = w.speculation.tokens + 1
        if draft:
            attention_tp = self.draft_tp(layout)
        return Shape(phase, tp=attention_tp, ep=ep,
                     expert_tp=layout.tp // ep if not draft else attention_tp,
                     expert_rows_scale=(layout.adp / ep) if not draft else 1.0,
                     batch=max(1, w.prefill_batch // layout.adp) if phase == "prefill"
                     else w.batch // layout.adp,
                     seq_len=w.prefill_tokens, context=w.decode_positions, query=q,
                     dtype=str(self.dtype).replace("torch.", ""))

    # ------------------------------------------------------------------------------------------
    def project(self, instance: str, layout: Layout, *, allow_overcommit: bool = False,
                refuse: bool = True) -> Result:
        """Project `layout` on `instance`. A layout that does not fit in HBM raises LayoutError
        naming the nearest one that does, unless allow_overcommit (then it is projected and
        marked) or refuse=False (marked, for the search)."""
        info = self.check_instance(instance)
        self.check_layout(layout)
        w = self.workload
        result = Result(instance, layout, projection={}, batch=w.batch)
        try:
            if w.training:
                result.projection, t = self._phase(instance, layout, "train")
            else:
                phases = {"decode": ("decode",), "prefill": ("prefill",),
                          "inference": ("prefill", "decode")}[w.kind]
                out = {ph: self._phase(instance, layout, ph) for ph in phases}
                if "prefill" in out:
                    result.prefill = out["prefill"][0]
                result.projection, t = out.get("decode", out.get("prefill"))
                if w.kind == "prefill":
                    result.prefill = None
        except ShardError as error:
            raise LayoutError(str(error)) from error
        result.trace_ops = t.ops
        result.unmodelled = dict(t.unmodelled)
        result.notes = list(t.notes)
        if self.dtype_note:
            result.notes.append(self.dtype_note)
        if result.prefill is not None:
            result.request = _request(result.projection, result.prefill, w, self.prices.get(instance))
        used, total = layout.ranks, info["ranks"]
        if used % total != 0 and used > 0:
            result.notes.append(
                f"uses {used} of the {math.ceil(used / total) * total} ranks it pays for "
                f"({info['ranks']} per instance): add dp (or choose another instance) to use them")
        result.fits = result.hbm_bytes <= result.capacity
        if not result.fits:
            if allow_overcommit:
                result.overcommitted = True
                result.notes.append(
                    f"OVER-COMMITTED: {result.hbm_bytes / 2**30:.1f} GiB per rank needed, "
                    f"{result.capacity / 2**30:.1f} GiB available; projected as asked, it would not run")
            elif refuse:
                from torch_neuronx.estimate._search import nearest_fitting

                near = nearest_fitting(self, instance, layout)
                raise LayoutError(
                    f"{layout} does not fit on {instance}: {result.hbm_bytes / 2**30:.1f} GiB per rank "
                    f"needed ({_memory_text(result)}), {result.capacity / 2**30:.1f} GiB available; "
                    + (f"nearest layout that fits: {near}" if near else
                       "no layout of up to the same number of ranks fits; add instances (dp/pp)")
                    + " (or pass allow_overcommit / --allow-overcommit to project it anyway)")
        return result

    # ------------------------------------------------------------------------------------------
    def _phase(self, instance: str, layout: Layout, phase: str):
        w = self.workload
        shape = self.shape(layout, phase)
        t = trace_rank(self.config, shape, progress=self.progress)
        layers = self.layers // layout.pp if self.layers else 0
        extra = []
        facts = self._stage_facts(t, layout, layers, shape)
        if phase == "decode" and w.speculation is not None:
            dshape = self.shape(layout, "decode", draft=True)
            d = trace_rank(self.draft, dshape, draft=True, progress=self.progress)
            k = w.speculation.tokens
            dl = self.draft_info["layers"]
            extra = [(d.outside, float(k), False), (d.period, k * dl / d.layers_per_period, True)]
            dfacts = self._stage_facts(d, Layout(tp=dshape.tp), dl, dshape)
            facts["draft_params_per_rank"] = dfacts["params_per_rank"]
            facts["draft_kv_cache_bytes_per_rank"] = dfacts["kv_cache_bytes_per_rank"]
        trace = t.stage_trace(layers, extra=extra) if t.period is not None else t.outside
        tokens = (w.batch * w.seq_len if phase == "train" else
                  w.prefill_tokens * shape.batch if phase == "prefill" else w.batch // layout.adp)
        spec = w.speculation if phase == "decode" else None
        workload = dict(
            phase=phase, tokens_per_microbatch=float(tokens), compiled=w.compiled,
            fp8=w.fp8 or w.weights == "fp8",
            weight_scale=(1.0 / (torch.finfo(self.dtype).bits // 8)) if w.weights != "bf16" else 1.0,
            kv_scale=0.5 if w.kv_cache == "fp8" and elem16(self.dtype) else 1.0,
            async_host=w.async_host, speculation=spec.tokens if spec else 0,
            acceptance=spec.acceptance if spec else 0.0, fused_speculation=spec.fused if spec else True,
            draft_tp=self.draft_tp(layout) if spec else 1)
        lay = layout.as_dict()
        projection = _C._estimate_project(trace, facts, lay, workload, instance, self.data_path,
                                          self.engine_path)
        if instance in self.prices:
            _reprice(projection, float(self.prices[instance]))
        return projection, t

    def _stage_facts(self, t, layout: Layout, layers: int, shape: Shape) -> dict:
        """Facts of the pipeline stage one rank belongs to: its parameters, activations and KV
        cache (outside the layers: the embedding and head, shared between first and last stage)."""
        f = t.facts
        periods = layers / t.layers_per_period if t.period is not None else 1
        outside_share = 1.0 if layout.pp == 1 else 0.5
        w = self.workload
        elem = torch.finfo(self.dtype).bits // 8
        stored = elem if w.weights == "bf16" else 1
        def total(name):
            return outside_share * f[name] + periods * f["period_" + name]
        # Sequence parallelism (tensor-parallel training, as NxD and Megatron-LM run it) keeps
        # 1/tp of the activations every tp rank would otherwise hold whole.
        sp = layout.tp if (w.training and layout.tp > 1) else 1
        activations = total("activation_bytes") - total("whole_activation_bytes") * (1 - 1 / sp)
        per_layer = (f["period_activation_bytes"] - f["period_whole_activation_bytes"] * (1 - 1 / sp)) / max(
            t.layers_per_period, 1)
        facts = dict(
            layers=int(self.layers or 0),
            hidden=int(getattr(self.config.get_text_config(), "hidden_size", 0) or 0),
            params=float(self.params),
            params_per_rank=total("params"),
            weight_bytes=float(stored),
            gradient_bytes=float(elem),
            optimizer_bytes=12.0,
            activation_bytes=elem,
            activation_bytes_per_rank=activations,
            selective_activation_bytes_per_rank=activations - total("attention_activation_bytes"),
            layer_input_bytes_per_rank=layer_input_bytes(self.config, shape, layers,
                                                         sequence_parallel=True),
            # Under full recompute one layer's activations (and the head's) live at a time.
            layer_activation_bytes=per_layer + outside_share * f["activation_bytes"],
            kv_cache_bytes_per_rank=total("kv_cache_bytes"),
            kv_width=float(kv_width(self.config, shape)),
        )
        return facts


def elem16(dtype) -> bool:
    return torch.finfo(dtype).bits == 16


def _memory_text(result: Result) -> str:
    parts = (result.prefill or {}).get("memory", []) if result.prefill and (
        result.prefill["hbm_bytes_per_rank"] > result.projection["hbm_bytes_per_rank"]) else (
        result.projection["memory"])
    return ", ".join(f"{name} {b / 2**30:.1f}" for name, b in parts if b > 0)


def _reprice(projection: dict, usd_per_hour: float) -> None:
    projection["price_usd_per_hour"] = usd_per_hour
    projection["price_source"] = "given on the command line / in the call"
    per_s = projection["instances"] * usd_per_hour / 3600.0
    projection["usd_per_million_tokens"] = per_s / projection["tokens_per_s"] * 1e6 if usd_per_hour > 0 else None


def _request(decode: dict, prefill: dict, w: Workload, price) -> dict:
    """A batch of requests end to end on one replica: each request's prefill in turn, then the
    batch decoded together until `output` tokens."""
    ttft = prefill["step_s"]
    per_step = decode["tokens_per_sequence_step"]
    tpot = decode["step_s"] / per_step
    steps = math.ceil((w.output - 1) / per_step) if w.output > 1 else 0
    replicas = decode["tokens_per_step"] / (w.batch * per_step)  # dp (x adp groups share w.batch)
    cycle = (w.batch // w.prefill_batch) * ttft + steps * decode["step_s"]
    tokens = w.batch * w.output * replicas
    throughput = tokens / cycle
    usd = decode["price_usd_per_hour"]
    usd_per_m = (decode["instances"] * usd / 3600.0) / throughput * 1e6 if usd else None
    return dict(ttft_s=ttft, tpot_s=tpot, latency_s=ttft + steps * decode["step_s"],
                output_tokens_per_s=throughput, usd_per_million_output_tokens=usd_per_m,
                tokens_per_step=per_step)


def fits_quickly(ctx: Context, instance: str, layout: Layout) -> bool:
    """Whether the weights and optimizer state alone leave room on one rank (a cheap first cut
    for the search, before any tracing)."""
    info = ctx.known[instance]
    w = ctx.workload
    # A lower bound of what a rank holds: experts may also be split over ep in training.
    params = ctx.params / (layout.tp * layout.pp * (layout.ep if w.training else 1))
    elem = torch.finfo(ctx.dtype).bits // 8
    if w.training:
        shard = layout.dp if layout.fsdp else 1
        states = 12 / (layout.dp if (layout.fsdp or layout.zero1) else 1)
        need = params * (2 * elem / shard + states)
    else:
        need = params * (elem if w.weights == "bf16" else 1)
    return need <= info["hbm_bytes_per_rank"]
