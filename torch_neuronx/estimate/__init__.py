"""What a workload would cost on Trainium and on GPUs, before renting either.

    from torch_neuronx.estimate import estimate, Layout
    e = estimate("llama-3.1-70b", workload="decode", instance="trn2.48xlarge",
                 layout=Layout(tp=64), batch=1, context=10240)
    print(e.summary())
    e.write_html("estimate.html"); e.write_png("estimate.png")

The model is traced at full size under fake tensors on the ``neuron`` device (no memory), one
rank of the parallel layout at a time; every ATen op's work comes from the backend's own FLOP
models and cost builder (the work its launch record would carry), and the torch-free cost model
(csrc/runtime/cost) turns it into time on the chosen instance and on the GPUs compared: per-op
engine time, ring collectives over NeuronLink / NVLink / EFA, overlap, pipeline bubble. Specs,
efficiencies and prices are the editable data files torch_neuronx/data/neuron_cores.ini and
estimate.ini, each value with its source. See docs/estimate.md, which also holds the validation
table against published results.

``python -m torch_neuronx.estimate --help`` is the command-line form.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace

import torch

from torch_neuronx import _C, _env
from torch_neuronx.estimate._models import PRESETS, load_config
from torch_neuronx.estimate._trace import count_params, trace_rank

__all__ = ["Estimate", "Layout", "Target", "estimate", "instances", "PRESETS", "data_paths"]

def data_paths(data: str | None = None) -> tuple[str, str]:
    """(estimate data file, engine model file): --data / TORCH_NEURONX_ESTIMATE_DATA or the shipped
    estimate.ini; NRTSIM_ENGINE_MODEL or the shipped neuron_cores.ini."""
    estimate_data = (data or _env.path("TORCH_NEURONX_ESTIMATE_DATA")
                     or _env.data_file("estimate.ini"))
    # The runtime's answer: NRTSIM_ENGINE_MODEL is the runtime's variable (csrc/runtime/Env).
    return estimate_data, _C._engine_model_path()


def instances(data: str | None = None) -> dict:
    """The instances the estimate data knows, with accelerator, device count and price."""
    return _C._estimate_instances(data_paths(data)[0])


@dataclass(frozen=True)
class Layout:
    """A parallel layout: tensor (tp), context (cp: each rank holds 1/cp of every sequence),
    pipeline (pp) and data (dp) parallel degrees; fsdp shards parameters, gradients and optimizer
    state over the dp group; recompute (activation checkpointing) keeps each layer's input and
    reruns its forward before its backward; microbatches per step (and per dp replica)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    fsdp: bool = False
    microbatches: int = 1
    cp: int = 1
    recompute: bool = False

    @classmethod
    def parse(cls, text: str) -> "Layout":
        """'tp=8,cp=2,pp=2,dp=4,fsdp,ac,mb=8' (any subset, any order; ac = activation
        checkpointing)."""
        fields: dict = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            if part == "fsdp":
                fields["fsdp"] = True
                continue
            if part in ("ac", "recompute"):
                fields["recompute"] = True
                continue
            key, _, value = part.partition("=")
            key = {"mb": "microbatches"}.get(key.strip(), key.strip())
            if key not in ("tp", "cp", "pp", "dp", "microbatches") or not value.strip().isdigit():
                raise ValueError(
                    f"bad layout item {part!r} in {text!r}: use tp=N, cp=N, pp=N, dp=N, mb=N, fsdp "
                    "and ac, comma-separated (e.g. 'tp=8,dp=4,fsdp')"
                )
            fields[key] = int(value)
        layout = cls(**fields)
        layout.check()
        return layout

    def check(self) -> None:
        for name in ("tp", "cp", "pp", "dp", "microbatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"layout {name}={getattr(self, name)} must be at least 1")

    @property
    def ranks(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def __str__(self) -> str:
        parts = [f"tp{self.tp}"] if self.tp > 1 else []
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.dp > 1:
            parts.append(f"{'fsdp' if self.fsdp else 'dp'}{self.dp}")
        if self.microbatches > 1:
            parts.append(f"mb{self.microbatches}")
        if self.recompute:
            parts.append("ac")
        return " ".join(parts) or "1 rank"


@dataclass
class Target:
    """One instance type's projection."""

    instance: str
    layout: Layout
    projection: dict
    trace_ops: int
    unmodelled: dict
    notes: list = field(default_factory=list)


@dataclass
class Estimate:
    model: str
    params: int
    workload: str  # "train" or "decode"
    batch: int
    seq_len: int
    context: int
    dtype: str
    compiled: bool
    targets: list

    def target(self, instance: str) -> Target:
        for t in self.targets:
            if t.instance == instance:
                return t
        raise KeyError(f"no projection for {instance!r}; have {[t.instance for t in self.targets]}")

    def to_dict(self) -> dict:
        d = asdict(self)
        for t in d["targets"]:
            t["layout"] = dict(t["layout"])
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def summary(self, top_ops: int = 10) -> str:
        from torch_neuronx.estimate._report import summary

        return summary(self, top_ops=top_ops)

    def write_png(self, path: str) -> str:
        from torch_neuronx.estimate._report import write_png

        return write_png(self, path)

    def write_html(self, path: str, png: str | None = None) -> str:
        from torch_neuronx.estimate._report import write_html

        return write_html(self, path, png=png)


def _gpu_layout(layout: Layout, workload: str, params: int, elem: int, gpu_memory: float) -> Layout:
    """A layout for 8-GPU instances: tensor parallelism stays inside one NVLink domain (at most 8);
    what it cannot shard moves to pipeline stages. For decode, the smallest tp (then pp) whose
    weights fit in 90% of the GPU's memory."""
    if workload == "decode":
        need = params * elem / (0.9 * gpu_memory)
        tp = next((t for t in (1, 2, 4, 8) if t >= need), 8)
        pp = max(1, math.ceil(need / tp))
        return replace(layout, tp=tp, pp=pp, cp=1, fsdp=False, microbatches=1)
    tp = min(layout.tp, 8)
    return replace(layout, tp=tp, pp=layout.pp * max(1, layout.tp // tp))


def estimate(
    model,
    *,
    workload: str = "train",
    instance: str = "trn2.48xlarge",
    layout: Layout | None = None,
    compare: tuple | list = ("p5.48xlarge", "p5en.48xlarge"),
    gpu_layout: Layout | None = None,
    batch: int = 1,
    seq_len: int = 2048,
    context: int = 2048,
    dtype: torch.dtype = torch.bfloat16,
    compiled: bool = True,
    fp8: bool = False,
    data: str | None = None,
    prices: dict | None = None,
) -> Estimate:
    """Project one training step (``workload="train"``: a micro-batch of ``batch`` sequences of
    ``seq_len`` tokens per rank group, forward, backward and AdamW) or one decode step
    (``workload="decode"``: ``batch`` sequences, one new token each, over a KV cache of ``context``
    positions) of ``model`` (a preset name, a config.json path, a dict, or a transformers config)
    on ``instance`` with ``layout``, and on each instance of ``compare`` with ``gpu_layout`` (by
    default the layout adapted to 8-GPU NVLink domains). ``compiled``: one program per phase (as
    TorchNeuron's torch.compile and NxD run), else one launch per op (eager). ``fp8``: the
    16-bit matmuls run at the FP8 Tensor-engine / tensor-core rate (FP8 training as Transformer
    Engine does it: GEMM inputs cast to FP8, everything else as traced). ``prices``:
    {instance: USD per hour} overriding the data file's."""
    if workload not in ("train", "decode"):
        raise ValueError(f"workload={workload!r}: use 'train' or 'decode'")
    for name, value in (("batch", batch), ("seq_len", seq_len), ("context", context)):
        if value < 1:
            raise ValueError(f"{name}={value} must be at least 1")
    layout = layout or Layout()
    layout.check()
    data_path, engine_path = data_paths(data)
    known = _C._estimate_instances(data_path)
    for name in [instance, *compare]:
        if name not in known:
            raise ValueError(f"unknown instance {name!r}; the estimate data knows: {sorted(known)}")
    config = load_config(model)
    elem = torch.finfo(dtype).bits // 8
    params = count_params(config, dtype)
    traces: dict = {}
    targets = []
    for name in [instance, *compare]:
        info = known[name]
        target_layout = layout
        if info["gpu"] and name != instance:
            if gpu_layout is not None:
                target_layout = gpu_layout
            else:
                target_layout = _gpu_layout(layout, workload, params, elem,
                                            info["hbm_bytes_per_device"])
        key = (target_layout.tp, target_layout.pp, target_layout.cp)
        if key not in traces:
            if workload == "train" and seq_len % target_layout.cp != 0:
                raise ValueError(
                    f"context parallelism cp={target_layout.cp} does not divide seq_len={seq_len}; "
                    "choose a cp that does")
            # A cp rank holds 1/cp of each sequence; the cost model widens its attention to the
            # whole sequence's keys.
            traces[key] = trace_rank(
                config, training=workload == "train", batch=batch,
                seq_len=seq_len // target_layout.cp if workload == "train" else seq_len,
                context=context, tp=target_layout.tp, pp=target_layout.pp, dtype=dtype)
        rank = traces[key]
        facts = dict(rank.facts, params=float(params))
        tokens = batch * seq_len if workload == "train" else batch
        projection = _C._estimate_project(
            rank.trace, facts,
            dict(tp=target_layout.tp, cp=target_layout.cp, pp=target_layout.pp, dp=target_layout.dp,
                 fsdp=target_layout.fsdp, recompute=target_layout.recompute,
                 microbatches=target_layout.microbatches),
            dict(training=workload == "train", tokens_per_microbatch=float(tokens), compiled=compiled,
                 fp8=fp8),
            name, data_path, engine_path)
        if prices and name in prices:
            _reprice(projection, float(prices[name]))
        notes = list(rank.notes)
        if projection["hbm_bytes_per_rank"] > projection["hbm_capacity_per_rank"]:
            notes.append(
                f"does not fit: {projection['hbm_bytes_per_rank'] / 2**30:.1f} GiB per rank needed, "
                f"{projection['hbm_capacity_per_rank'] / 2**30:.1f} GiB available; raise tp/pp or use fsdp"
            )
        targets.append(Target(name, target_layout, projection, rank.ops, dict(rank.unmodelled), notes))
    name = model if isinstance(model, str) else getattr(config, "name_or_path", "") or type(config).__name__
    return Estimate(model=os.path.basename(str(name)), params=params, workload=workload, batch=batch,
                    seq_len=seq_len, context=context, dtype=str(dtype).replace("torch.", ""),
                    compiled=compiled, targets=targets)


def _reprice(projection: dict, usd_per_hour: float) -> None:
    projection["price_usd_per_hour"] = usd_per_hour
    projection["price_source"] = "given on the command line / in the call"
    per_s = projection["instances"] * usd_per_hour / 3600.0
    projection["usd_per_million_tokens"] = per_s / projection["tokens_per_s"] * 1e6 if usd_per_hour > 0 else None
