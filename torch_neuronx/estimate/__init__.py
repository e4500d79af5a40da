"""What a workload would cost on Trainium and on GPUs, before renting either.

    from torch_neuronx.estimate import estimate, Layout
    e = estimate("llama-3.3-70b", workload="inference", instance="trn2.48xlarge",
                 layout=Layout(tp=64), batch=1, prompt=10240, output=1536)
    print(e.summary())
    e.write_html("estimate.html"); e.write_png("estimate.png")

The model is traced at full size under fake tensors on the ``neuron`` device (no memory), one
rank of the parallel layout at a time and one period of layers at a time; every ATen op's work
comes from the backend's own FLOP models and cost builder (the work its launch record would
carry), and the torch-free cost model (csrc/runtime/cost) turns it into time on the chosen
instance and on the GPUs compared: per-op engine time, the collectives of the model's parallel
plan over NeuronLink / NVLink / EFA with the vendor libraries' algorithms, overlap, pipeline
bubble, the memory table that decides what fits. Specs, efficiencies and prices are the editable
data files torch_neuronx/data/neuron_cores.ini and estimate.ini, each value with its source.
See docs/estimate.md, which also holds the validation table against published results.

``python -m torch_neuronx.estimate --help`` is the command-line form.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch

from torch_neuronx import _C
from torch_neuronx.estimate._layout import DEFAULT_ACCEPTANCE, Layout, Speculation
from torch_neuronx.estimate._models import PRESETS, load_config
from torch_neuronx.estimate._project import (Context, LayoutError, Result, Workload, data_paths,
                                             _reprice)
from torch_neuronx.estimate._trace import count_params

__all__ = ["Estimate", "Layout", "LayoutError", "Speculation", "Target", "Workload", "estimate",
           "search", "instances", "PRESETS", "data_paths", "DEFAULT_ACCEPTANCE"]

Target = Result  # one instance's projection (the name earlier releases used)


def instances(data: str | None = None) -> dict:
    """The instances the estimate data knows: accelerator, devices, ranks, HBM per rank, price."""
    return _C._estimate_instances(*data_paths(data))


@dataclass
class Estimate:
    model: str
    params: int
    workload: Workload
    targets: list

    # Fields earlier releases had at the top level.
    @property
    def batch(self) -> int:
        return self.workload.batch

    @property
    def seq_len(self) -> int:
        return self.workload.seq_len

    @property
    def context(self) -> int:
        return self.workload.decode_context

    @property
    def dtype(self) -> str:
        return self.workload.dtype

    @property
    def compiled(self) -> bool:
        return self.workload.compiled

    def target(self, instance: str) -> Result:
        for t in self.targets:
            if t.instance == instance:
                return t
        raise KeyError(f"no projection for {instance!r}; have {[t.instance for t in self.targets]}")

    def to_dict(self) -> dict:
        d = dict(model=self.model, params=self.params,
                 workload={k: v for k, v in asdict(self.workload).items() if k != "speculation"},
                 targets=[])
        if self.workload.speculation is not None:
            s = self.workload.speculation
            d["workload"]["speculation"] = dict(draft=str(s.draft), tokens=s.tokens,
                                                acceptance=s.acceptance, fused=s.fused)
        for t in self.targets:
            d["targets"].append(dict(
                instance=t.instance, layout=t.layout.as_dict(), layout_text=str(t.layout),
                chosen=t.chosen, batch=t.batch, projection=t.projection, prefill=t.prefill,
                request=t.request, trace_ops=t.trace_ops, unmodelled=t.unmodelled, notes=t.notes,
                fits=t.fits, overcommitted=t.overcommitted))
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


def _workload(workload, *, batch, seq_len, context, prompt, output, dtype, compiled, fp8, weights,
              speculation, async_host, kv_cache="bf16", prefill_batch=1, buckets=()) -> Workload:
    dtype_name = str(dtype).replace("torch.", "") if not isinstance(dtype, str) else dtype
    return Workload(kind=workload, batch=batch, seq_len=seq_len, prompt=prompt, output=output,
                    context=context, dtype=dtype_name, compiled=compiled, fp8=fp8,
                    weights=weights, speculation=speculation, async_host=async_host,
                    kv_cache=kv_cache, prefill_batch=prefill_batch, buckets=tuple(buckets or ()))


def estimate(
    model,
    *,
    workload: str = "train",
    instance: str = "trn2.48xlarge",
    layout: Layout | None = None,
    compare: tuple | list = ("p5.48xlarge", "p5en.48xlarge"),
    gpu_layout: Layout | None = None,
    gpu_objective: str | None = None,
    batch: int = 1,
    seq_len: int = 2048,
    context: int = 0,
    prompt: int = 2048,
    output: int = 256,
    dtype: torch.dtype | str = torch.bfloat16,
    compiled: bool = True,
    fp8: bool = False,
    weights: str = "bf16",
    speculation: Speculation | None = None,
    async_host: bool = True,
    kv_cache: str = "bf16",
    prefill_batch: int = 1,
    buckets: tuple = (),
    data: str | None = None,
    prices: dict | None = None,
    allow_overcommit: bool = False,
    progress=None,
) -> Estimate:
    """Project `model` (a preset name, a config.json path, a dict, or a transformers config) on
    `instance` with `layout`, and on each instance of `compare`.

    workload: "train" (one optimizer step: `layout.microbatches` micro-batches of `batch`
    sequences of `seq_len` tokens per replica, forward, backward, AdamW), "inference" (requests
    of `prompt` input and `output` generated tokens, `batch` of them decoded together per
    replica: time to first token, time per output token, throughput, $ per 1M output tokens),
    "decode" or "prefill" (that phase alone; decode over a KV cache of `context` positions, by
    default the prompt plus half the output).

    The compared GPU instances use `gpu_layout` if given; otherwise the layout a GPU team would
    pick, found by searching the layouts of whole instances (no idle GPU billed):
    gpu_objective "latency" (fastest) or "cost" (cheapest per token); by default cost for
    training and latency for inference. Each target says how its layout was chosen.

    A layout that does not fit in HBM, a degree that does not divide what it shards, more
    pipeline stages than layers, or an architecture without a parallel plan raise LayoutError
    naming the nearest layout that works; allow_overcommit projects a layout that does not fit
    anyway, marked as such. weights: "bf16", "fp8" (FP8 weights and matmuls) or "int8" (int8
    weights, 16-bit matmuls). compiled: one program per phase (as TorchNeuron's torch.compile,
    NxD and NxD Inference run), else one launch per op. fp8: training's 16-bit matmuls at the
    FP8 rate. async_host=False: a serving loop that waits for each step on the host (the data
    file's host_step_us per step). kv_cache: "bf16" or "fp8". prefill_batch: requests prefilled
    together (1: one at a time, NxD Inference's default; `batch`: static batching).
    buckets: (max context length, sequence length) of a deployment compiled with NxD Inference's
    automatic buckets (transformers-neuronx's defaults for a power-of-two n_positions N: (N/2,
    N)): the prompt is padded to its context-encoding bucket, each decode step attends over its
    token-generation bucket. prices: {instance: USD per hour}."""
    w = _workload(workload, batch=batch, seq_len=seq_len, context=context, prompt=prompt,
                  output=output, dtype=dtype, compiled=compiled, fp8=fp8, weights=weights,
                  speculation=speculation, async_host=async_host, kv_cache=kv_cache,
                  prefill_batch=prefill_batch, buckets=buckets)
    ctx = Context(model, w, data=data, prices=prices, progress=progress)
    for name in [instance, *compare]:
        ctx.check_instance(name)
    layout = layout or Layout()
    targets = [ctx.project(instance, layout, allow_overcommit=allow_overcommit)]
    objective = gpu_objective or ("cost" if w.training else "latency")
    if objective not in ("latency", "cost"):
        raise ValueError(f"gpu_objective={objective!r}: use 'latency' or 'cost'")
    for name in compare:
        info = ctx.known[name]
        if gpu_layout is not None or not info["gpu"]:
            chosen = gpu_layout if info["gpu"] else layout
            targets.append(ctx.project(name, chosen, allow_overcommit=allow_overcommit))
            continue
        targets.append(best_layout(ctx, name, objective, primary=targets[0], progress=progress))
    return Estimate(model=ctx.name, params=ctx.params, workload=w, targets=targets)


def best_layout(ctx: Context, instance: str, objective: str, *, primary: Result | None = None,
                progress=None) -> Result:
    """The layout of whole `instance`s a team would pick: the fastest or the cheapest that fits.
    Training keeps the primary target's global batch on as many instances as it uses (more if
    nothing fits); inference uses the fewest instances that hold the model."""
    from torch_neuronx.estimate._search import search as run

    w = ctx.workload
    instances, global_batch = 1, None
    if primary is not None and w.training:
        global_batch = w.batch * primary.layout.microbatches * primary.layout.dp
        instances = max(1, primary.projection["instances"])
    reasons: dict = {}
    # More instances when nothing fits; in training, a larger global batch (doubling) when the
    # primary's cannot fill the instances' data-parallel replicas.
    for n in (instances * 2 ** i for i in range(7)):
        for scale in ((1, 2, 4, 8, 16, 32, 64) if global_batch else (1,)):
            found = run(ctx, instance, instances=n,
                        global_batch=global_batch * scale if global_batch else None,
                        progress=progress)
            for reason, count in found.refused.items():
                reasons[reason] = reasons.get(reason, 0) + count
            pick = found.fastest() if objective == "latency" else (found.cheapest() or found.fastest())
            if pick is not None:
                pick.chosen = (f"{'fastest' if objective == 'latency' else 'cheapest'} of "
                               f"{len(found.fitting)} layouts that fit on {n} instance(s)")
                if scale > 1:
                    pick.chosen += f", global batch {global_batch * scale} (x{scale} to fill them)"
                return pick
    why = "; ".join(f"{r} ({c})" for r, c in sorted(reasons.items(), key=lambda x: -x[1])[:3])
    raise LayoutError(f"no layout of up to {instances * 64} {instance} instances runs the model: {why}")


def search(model, *, workload: str = "train", instances_to_try=("trn2.48xlarge", "p5.48xlarge",
           "p5en.48xlarge"), count: int = 1, global_batch: int | None = None, batches=None,
           batch: int = 1, seq_len: int = 2048, context: int = 0, prompt: int = 2048,
           output: int = 256, dtype=torch.bfloat16, compiled: bool = True, fp8: bool = False,
           weights: str = "bf16", speculation: Speculation | None = None, async_host: bool = True,
           kv_cache: str = "bf16", prefill_batch: int = 1, buckets: tuple = (),
           data: str | None = None, prices: dict | None = None, progress=None) -> dict:
    """Every layout `count` whole instances of each type allow (tp, pp, dp, ep, adp, recompute,
    ZeRO-1, micro-batch size; batches for inference), projected: {instance: InstanceSearch}
    with the fastest and the cheapest layout that fit."""
    from torch_neuronx.estimate._search import search as run

    w = _workload(workload, batch=batch, seq_len=seq_len, context=context, prompt=prompt,
                  output=output, dtype=dtype, compiled=compiled, fp8=fp8, weights=weights,
                  speculation=speculation, async_host=async_host, kv_cache=kv_cache,
                  prefill_batch=prefill_batch, buckets=buckets)
    ctx = Context(model, w, data=data, prices=prices, progress=progress)
    out = {}
    for name in instances_to_try:
        ctx.check_instance(name)
        out[name] = run(ctx, name, instances=count, global_batch=global_batch, batches=batches,
                        progress=progress)
    return out
