"""The layouts an instance allows, projected and ranked: the fastest and the cheapest that fit.

Every layout with the same per-rank shapes (tp, ep, the micro-batch and sequence one rank holds)
reuses one trace of one period of layers; pp, dp, ZeRO-1, recompute and the number of micro-
batches only change how the cost model counts and overlaps it. Layouts whose weights and
optimizer state cannot fit are dropped before any tracing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from torch_neuronx.estimate._layout import Layout
from torch_neuronx.estimate._project import Context, LayoutError, Result, fits_quickly


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def _experts(ctx: Context) -> int:
    text = ctx.config.get_text_config()
    return int(getattr(text, "num_experts", 0) or getattr(text, "n_routed_experts", 0) or 0)


def candidates(ctx: Context, instance: str, *, instances: int = 1, global_batch: int | None = None,
               batches=None) -> list[Layout]:
    """Layouts that use every rank of `instances` instances exactly (no idle accelerator is
    billed). Training keeps the global batch (sequences per step) fixed; inference tries the
    batches given (sequences decoded together per replica)."""
    info = ctx.known[instance]
    ranks = info["ranks"] * instances
    L = ctx.layers or 1
    experts = _experts(ctx)
    out = []
    tps = [t for t in _powers_of_two(ranks) if ranks % t == 0]
    pps = [p for p in _divisors(L) if p <= max(1, ranks)]
    if ctx.workload.training:
        g = global_batch or ctx.workload.batch
        for tp in tps:
            for pp in pps:
                if ranks % (tp * pp):
                    continue
                dp = ranks // (tp * pp)
                for mbs in (1, 2, 4):
                    if g % (mbs * dp):
                        continue
                    mb = g // (mbs * dp)
                    if pp > 1 and mb < pp:
                        continue  # the pipeline would be mostly bubble
                    eps = [e for e in _divisors(dp) if experts and experts % e == 0] if experts else [1]
                    for ep in eps:
                        for recompute in ("none", "selective", "full"):
                            for zero1 in ((False, True) if dp > 1 else (False,)):
                                out.append((mbs, Layout(tp=tp, pp=pp, dp=dp, microbatches=mb, ep=ep,
                                                        recompute=recompute, zero1=zero1)))
    else:
        for tp in tps:
            for pp in pps:
                if ranks % (tp * pp):
                    continue
                dp = ranks // (tp * pp)
                eps = [e for e in _divisors(tp) if experts and experts % e == 0] if experts else [1]
                adps = [a for a in _divisors(tp)] if experts else [1]
                for batch in batches or (ctx.workload.batch,):
                    for ep in eps:
                        for adp in adps:
                            if batch % adp:
                                continue
                            out.append((batch, Layout(tp=tp, pp=pp, dp=dp, ep=ep, adp=adp)))
    return out


@dataclass
class InstanceSearch:
    instance: str
    instances: int
    tried: int = 0
    fitting: list = field(default_factory=list)   # (Result, batch) that fit
    refused: dict = field(default_factory=dict)    # reason -> count
    seconds: float = 0.0

    def fastest(self) -> Result | None:
        return min(self.fitting, key=lambda r: _latency(r[0]), default=(None,))[0]

    def cheapest(self) -> Result | None:
        priced = [r for r in self.fitting if _cost(r[0]) is not None]
        return min(priced, key=lambda r: _cost(r[0]), default=(None,))[0]


def _latency(r: Result) -> float:
    """Step time (training), time per output token (inference) or the phase's step."""
    if r.request is not None:
        return r.request["tpot_s"]
    return r.projection["step_s"] / r.projection.get("tokens_per_sequence_step", 1)


def _cost(r: Result):
    if r.request is not None:
        return r.request["usd_per_million_output_tokens"]
    return r.projection["usd_per_million_tokens"]


def search(ctx: Context, instance: str, *, instances: int = 1, global_batch: int | None = None,
           batches=None, progress=None) -> InstanceSearch:
    start = time.perf_counter()
    found = InstanceSearch(instance, instances)
    layouts = candidates(ctx, instance, instances=instances, global_batch=global_batch,
                         batches=batches)
    for i, (batch, layout) in enumerate(layouts):
        found.tried += 1
        if progress and (i % 10 == 0 or i == len(layouts) - 1):
            progress(f"{instance}: layout {i + 1}/{len(layouts)} ({layout}, batch {batch})")
        c = ctx.with_batch(batch)
        if not fits_quickly(c, instance, layout):
            found.refused["weights and optimizer state do not fit"] = found.refused.get(
                "weights and optimizer state do not fit", 0) + 1
            continue
        try:
            r = c.project(instance, layout, refuse=False)
        except LayoutError as error:
            reason = str(error).split(";")[0]
            found.refused[reason] = found.refused.get(reason, 0) + 1
            continue
        if r.fits:
            found.fitting.append((r, batch))
        else:
            found.refused["does not fit in HBM"] = found.refused.get("does not fit in HBM", 0) + 1
    found.seconds = time.perf_counter() - start
    return found


def nearest_fitting(ctx: Context, instance: str, layout: Layout) -> Layout | None:
    """The layout of the same ranks nearest to `layout` that fits: fewest changed settings,
    then the fastest."""
    ranks = layout.ranks
    options = []
    info = ctx.known[instance]
    instances = max(1, -(-ranks // info["ranks"]))
    for batch, cand in candidates(ctx, instance, instances=instances,
                                  global_batch=ctx.workload.batch * layout.microbatches * layout.dp,
                                  batches=(ctx.workload.batch,)):
        if cand.ranks != ranks or (ctx.workload.training and batch != ctx.workload.batch):
            continue
        options.append(cand)
    # The settings a team changes first cost least: recompute and ZeRO-1, then the split.
    weights = dict(recompute=1, zero1=1, fsdp=1, microbatches=1, pp=2, tp=2, dp=2, ep=2, adp=2, cp=3)

    def distance(c: Layout) -> int:
        return sum(w for name, w in weights.items() if getattr(c, name) != getattr(layout, name))

    options.sort(key=distance)
    best = None
    for cand in options:
        if best is not None and distance(cand) > best[0]:
            break
        if not fits_quickly(ctx, instance, cand):
            continue
        try:
            r = ctx.project(instance, cand, refuse=False)
        except LayoutError:
            continue
        if r.fits and (best is None or _latency(r) < best[2]):
            best = (distance(cand), cand, _latency(r))
    return best[1] if best else None
