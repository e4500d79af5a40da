"""The estimate as text, a PNG chart and an HTML page; the search as a table and a chart."""

from __future__ import annotations

import base64
import html
import os

_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")


def _time(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def _usd(value, source: str = "") -> str:
    if value is None:
        return "n/a (no price)"
    return f"${value:.3g}" + (" (est.)" if source.startswith("estimate") else "")


def _params(n: int) -> str:
    if not n:
        return "parameters not known"
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.2f} {unit} parameters"
    return f"{n} parameters"


def _headline(e) -> str:
    w = e.workload
    what = {
        "train": f"training step: micro-batch {w.batch} x {w.seq_len} tokens",
        "decode": f"decode step: batch {w.batch}, KV cache {w.decode_positions} positions",
        "prefill": f"prefill: {w.prompt} prompt tokens"
                   + (f" (bucket {w.prefill_tokens})" if w.prefill_tokens != w.prompt else ""),
        "inference": f"inference: {w.prompt} in / {w.output} out, batch {w.batch}",
    }[w.kind]
    if w.weights != "bf16":
        what += f", {w.weights} weights"
    if w.buckets and w.kind == "inference":
        what += (f", bucketed: prefill of {w.prefill_tokens} tokens, decode over "
                 f"{w.decode_positions} positions (the mean of its steps' buckets)")
    if w.speculation is not None:
        s = w.speculation
        what += (f", speculative decoding ({s.tokens} tokens/step, acceptance {s.acceptance:g}, "
                 f"{'fused' if s.fused else 'unfused'})")
    if w.kind != "train" and not w.async_host:
        what += ", synchronous host loop"
    mode = "compiled (one program per phase)" if w.compiled else "eager (one launch per op)"
    return f"{e.model} ({_params(e.params)}, {w.dtype}), {what}, {mode}"


def rows(e) -> list[tuple[str, list[str]]]:
    """The comparison table: (label, one cell per target)."""
    out = []
    ts = e.targets
    ps = [t.projection for t in ts]
    out.append(("layout", [str(t.layout) + (" (OVER-COMMITTED)" if t.overcommitted else "") for t in ts]))
    out.append(("layout chosen", [t.chosen for t in ts]))
    out.append(("ranks / instances", [f"{p['ranks']} / {p['instances']}" for p in ps]))
    if e.workload.kind == "inference":
        rq = [t.request for t in ts]
        out.append(("time to first token", [_time(r["ttft_s"]) for r in rq]))
        out.append(("time per output token", [_time(r["tpot_s"]) for r in rq]))
        out.append(("output tokens/s", [f"{r['output_tokens_per_s']:.4g}" for r in rq]))
        out.append(("$ per 1M output tokens", [_usd(r["usd_per_million_output_tokens"], p["price_source"])
                                                for r, p in zip(rq, ps)]))
    else:
        label = {"train": "step time", "decode": "time per decode step", "prefill": "prefill time"}[
            e.workload.kind]
        out.append((label, [_time(p["step_s"]) for p in ps]))
        out.append(("tokens/s", [f"{p['tokens_per_s']:.4g}" for p in ps]))
        out.append(("$ per 1M tokens", [_usd(p["usd_per_million_tokens"], p["price_source"]) for p in ps]))
    out.append(("MFU", [f"{100 * p['mfu']:.1f}%" for p in ps]))
    out.append(("HBM per rank", [f"{t.hbm_bytes / 2**30:.1f} / {t.capacity / 2**30:.0f} GiB" for t in ts]))
    out.append(("bound", [p["bound"] for p in ps]))
    return out


def _phase_lines(p: dict, title: str) -> list[str]:
    lines = [title, "phase            time       bound         " + " ".join(f"{n:>9}" for n in _ENGINES)]
    for ph in p["phases"]:
        engines = " ".join(f"{_time(ph['engine_s'][n]):>9}" for n in _ENGINES)
        lines.append(f"{ph['phase']:16} {_time(ph['s']):>9}  {ph['bound']:12}  {engines}")
    lines.append("step: " + ", ".join(f"{name} {_time(s)}" for name, s in p["parts"])
                 + f" = {_time(p['step_s'])}")
    for c in p["collectives"]:
        lines.append(f"  {c['name']:26} {c['count']:.4g} x {_time(c['s_each'])} over {c['ranks']} ranks "
                     f"({c['over']}), {c['bytes'] / 2**20:.3g} MiB each; exposed {_time(c['exposed_s'])}")
    lines.append("memory per rank: " + ", ".join(f"{name} {b / 2**30:.2f} GiB" for name, b in p["memory"])
                 + f" = {p['hbm_bytes_per_rank'] / 2**30:.2f} of {p['hbm_capacity_per_rank'] / 2**30:.0f} GiB")
    return lines


def summary(e, top_ops: int = 10) -> str:
    lines = [_headline(e), ""]
    names = [t.instance for t in e.targets]
    width = max(16, *(len(n) + 2 for n in names), *(len(str(t.layout)) + 2 for t in e.targets))
    lines.append(f"{'':24}" + "".join(f"{n:>{width}}" for n in names))
    for label, cells in rows(e):
        if label == "layout chosen":
            continue
        lines.append(f"{label:24}" + "".join(f"{c:>{width}}" for c in cells))
    for t in e.targets:
        p = t.projection
        lines += ["", f"== {t.instance} ({p['accelerator']}, {t.layout}; {t.chosen}) =="]
        if t.prefill is not None:
            lines += _phase_lines(t.prefill, "-- prefill (one request) --")
            lines += _phase_lines(p, "-- decode (one step of the batch) --")
        else:
            lines += _phase_lines(p, "")
        if p["pipeline_bubble_s"] > 0:
            lines.append(f"pipeline bubble  {_time(p['pipeline_bubble_s']):>9}")
        lines.append(f"top ops ({t.trace_ops} traced on one rank):")
        for o in p["ops"][:top_ops]:
            lines.append(f"  {o['op']:52} {o['phase']:9} x{o['count']:<7.4g} {_time(o['s']):>9}  "
                         f"{o['flops'] / 1e9:10.3g} GFLOP {o['bytes'] / 2**20:10.4g} MiB")
        if t.unmodelled:
            lines.append("ops without a model (one Vector pass each): " + ", ".join(sorted(t.unmodelled)))
        for n in t.notes:
            lines.append(f"note: {n}")
        lines.append(f"price: ${p['price_usd_per_hour']:.2f}/h per instance ({p['price_source']})")
    return "\n".join(lines)


def write_png(e, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [t.instance for t in e.targets]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    # Time per step by what it is made of: the parts add up to the reported step time.
    parts: list[str] = []
    for t in e.targets:
        for name, _ in t.projection["parts"]:
            if name not in parts:
                parts.append(name)
    bottom = [0.0] * len(names)
    for part in parts:
        heights = [1e3 * sum(s for n, s in t.projection["parts"] if n == part) for t in e.targets]
        left.bar(names, heights, bottom=bottom, label=part)
        bottom = [b + h for b, h in zip(bottom, heights)]
    unit = {"train": "ms per step", "decode": "ms per decode step", "prefill": "ms per prefill",
            "inference": "ms per decode step"}[e.workload.kind]
    left.set_ylabel(unit)
    left.set_title("time per step")
    left.legend(fontsize=7)
    if e.workload.kind == "inference":
        usd = [t.request["usd_per_million_output_tokens"] or 0 for t in e.targets]
        right.set_ylabel("USD per 1M output tokens")
    else:
        usd = [t.projection["usd_per_million_tokens"] or 0 for t in e.targets]
        right.set_ylabel("USD per 1M tokens")
    right.bar(names, usd, color=["#ff9900" if not t.projection["gpu"] else "#76b900" for t in e.targets])
    right.set_title("cost (0 = no price known)")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(_headline(e), fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_html(e, path: str, png: str | None = None) -> str:
    esc = html.escape
    parts = ["<!doctype html><meta charset='utf-8'><title>torch_neuronx estimate</title>",
             "<style>body{font-family:sans-serif;max-width:1100px}td,th{padding:2px 8px;text-align:right}"
             "td:first-child,th:first-child{text-align:left}table{border-collapse:collapse}"
             "tr:nth-child(even){background:#f3f3f3}</style>",
             f"<h1>Estimate</h1><p>{esc(_headline(e))}</p>"]
    if png is not None and os.path.exists(png):
        with open(png, "rb") as f:
            parts.append("<img alt='chart' src='data:image/png;base64,"
                         + base64.b64encode(f.read()).decode() + "'>")
    parts.append("<table><tr><th></th>" + "".join(f"<th>{esc(t.instance)}</th>" for t in e.targets) + "</tr>")
    for label, cells in rows(e):
        parts.append(f"<tr><td>{esc(label)}</td>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    parts.append("</table>")
    for t in e.targets:
        p = t.projection
        parts.append(f"<h2>{esc(t.instance)} ({esc(p['accelerator'])}, {esc(str(t.layout))})</h2>")
        for label, proj in (("prefill", t.prefill), ("step", p)):
            if proj is None:
                continue
            parts.append(f"<h3>{label}</h3><table><tr><th>phase</th><th>time</th><th>bound</th>"
                         + "".join(f"<th>{n}</th>" for n in _ENGINES) + "</tr>")
            for ph in proj["phases"]:
                parts.append(f"<tr><td>{esc(ph['phase'])}</td><td>{_time(ph['s'])}</td><td>{esc(ph['bound'])}</td>"
                             + "".join(f"<td>{_time(ph['engine_s'][n])}</td>" for n in _ENGINES) + "</tr>")
            parts.append("</table><table><tr><th>part of the step</th><th>time</th></tr>"
                         + "".join(f"<tr><td>{esc(n)}</td><td>{_time(s)}</td></tr>" for n, s in proj["parts"])
                         + "</table><table><tr><th>memory per rank</th><th>GiB</th></tr>"
                         + "".join(f"<tr><td>{esc(n)}</td><td>{b / 2**30:.2f}</td></tr>" for n, b in proj["memory"])
                         + "</table>")
            parts.append("<table><tr><th>collective</th><th>over</th><th>ranks</th>"
                         "<th>MiB</th><th>calls</th><th>each</th><th>exposed</th></tr>")
            for c in proj["collectives"]:
                parts.append(f"<tr><td>{esc(c['name'])}</td><td>{esc(c['over'])}</td><td>{c['ranks']}</td>"
                             f"<td>{c['bytes'] / 2**20:.4g}</td><td>{c['count']:.4g}</td><td>{_time(c['s_each'])}</td>"
                             f"<td>{_time(c['exposed_s'])}</td></tr>")
            parts.append("</table>")
        parts.append("<h3>Ops (one rank)</h3><table><tr><th>op</th><th>phase</th><th>count</th>"
                     "<th>time</th><th>GFLOP</th><th>MiB</th></tr>")
        for o in p["ops"][:30]:
            parts.append(f"<tr><td>{esc(o['op'])}</td><td>{esc(o['phase'])}</td><td>{o['count']:.4g}</td>"
                         f"<td>{_time(o['s'])}</td><td>{o['flops'] / 1e9:.4g}</td><td>{o['bytes'] / 2**20:.4g}</td></tr>")
        parts.append("</table>")
        notes = [f"layout: {t.chosen}"] + list(t.notes) + [
            f"price: ${p['price_usd_per_hour']:.2f}/h ({p['price_source']})"]
        if t.unmodelled:
            notes.append("ops without a model (one Vector pass each): " + ", ".join(sorted(t.unmodelled)))
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(parts))
    return path


# ---------------------------------------------------------------------------------------------
# The search.

def search_summary(results: dict, workload) -> str:
    from torch_neuronx.estimate._search import _cost, _latency

    inference = workload.kind == "inference"
    lat = "time per output token" if inference else (
        "step time" if workload.kind == "train" else "step")
    lines = []
    for name, found in results.items():
        lines.append(f"== {name}: {found.tried} layouts tried on {found.instances} instance(s), "
                     f"{len(found.fitting)} fit ({found.seconds:.1f} s) ==")
        for reason, n in sorted(found.refused.items(), key=lambda x: -x[1]):
            lines.append(f"  refused {n}: {reason}")
        for label, r in (("fastest", found.fastest()), ("cheapest", found.cheapest())):
            if r is None:
                lines.append(f"  {label}: none")
                continue
            cost = _cost(r)
            lines.append(f"  {label:8} {str(r.layout):32} batch {r.batch:<4} {lat} {_time(_latency(r))}, "
                         f"{_usd(cost, r.projection['price_source'])} per 1M "
                         f"{'output ' if inference else ''}tokens, HBM {r.hbm_bytes / 2**30:.1f} / "
                         f"{r.capacity / 2**30:.0f} GiB, MFU {100 * r.projection['mfu']:.1f}%")
    return "\n".join(lines)


def write_search_png(results: dict, workload, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from torch_neuronx.estimate._search import _cost, _latency

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, found in results.items():
        pts = [(_latency(r) * 1e3, _cost(r)) for r, _ in found.fitting if _cost(r) is not None]
        if not pts:
            continue
        line = ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=12, alpha=0.5, label=name)
        fastest, cheapest = found.fastest(), found.cheapest()
        marks = [("fastest", fastest, "^"), ("cheapest", cheapest, "*")]
        if fastest is cheapest:
            marks = [("fastest and cheapest", fastest, "*")]
        for label, r, marker in marks:
            if r is not None and _cost(r) is not None:
                ax.scatter([_latency(r) * 1e3], [_cost(r)], s=140, marker=marker,
                           color=line.get_facecolor()[0], edgecolor="black")
                ax.annotate(f"{label}: {r.layout}", (_latency(r) * 1e3, _cost(r)), fontsize=7,
                            xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ms per output token" if workload.kind == "inference" else "ms per step")
    ax.set_ylabel("USD per 1M " + ("output " if workload.kind == "inference" else "") + "tokens")
    ax.set_title("layouts that fit (triangle: fastest, star: cheapest)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
