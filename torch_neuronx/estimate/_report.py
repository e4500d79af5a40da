"""The estimate as text, a PNG chart and an HTML page."""

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


def _usd(p: dict) -> str:
    v = p["usd_per_million_tokens"]
    if v is None:
        return "n/a (no price)"
    return f"${v:.3g}" + (" (est.)" if p["price_source"].startswith("estimate") else "")


def _headline(e) -> str:
    what = (f"training step: micro-batch {e.batch} x {e.seq_len} tokens" if e.workload == "train"
            else f"decode step: batch {e.batch}, KV cache {e.context} positions")
    mode = "compiled (one program per phase)" if e.compiled else "eager (one launch per op)"
    return f"{e.model} ({e.params / 1e9:.2f} B parameters, {e.dtype}), {what}, {mode}"


def rows(e) -> list[tuple[str, list[str]]]:
    """The comparison table: (label, one cell per target)."""
    out = []
    ps = [t.projection for t in e.targets]
    out.append(("layout", [str(t.layout) for t in e.targets]))
    out.append(("ranks / instances", [f"{p['ranks']} / {p['instances']}" for p in ps]))
    label = "step time" if e.workload == "train" else "time per output token"
    out.append((label, [_time(p["step_s"]) for p in ps]))
    out.append(("tokens/s", [f"{p['tokens_per_s']:.4g}" for p in ps]))
    out.append(("MFU", [f"{100 * p['mfu']:.1f}%" for p in ps]))
    out.append(("HBM per rank", [
        f"{p['hbm_bytes_per_rank'] / 2**30:.1f} / {p['hbm_capacity_per_rank'] / 2**30:.0f} GiB" for p in ps]))
    out.append(("$ per 1M tokens", [_usd(p) for p in ps]))
    out.append(("bound", [p["bound"] for p in ps]))
    return out


def summary(e, top_ops: int = 10) -> str:
    lines = [_headline(e), ""]
    names = [t.instance for t in e.targets]
    width = max(16, *(len(n) + 2 for n in names))
    lines.append(f"{'':24}" + "".join(f"{n:>{width}}" for n in names))
    for label, cells in rows(e):
        lines.append(f"{label:24}" + "".join(f"{c:>{width}}" for c in cells))
    for t in e.targets:
        p = t.projection
        lines += ["", f"== {t.instance} ({p['accelerator']}, {t.layout}) =="]
        lines.append("phase            time       bound         " + " ".join(f"{n:>9}" for n in _ENGINES))
        for ph in p["phases"]:
            engines = " ".join(f"{_time(ph['engine_s'][n]):>9}" for n in _ENGINES)
            lines.append(f"{ph['phase']:16} {_time(ph['s']):>9}  {ph['bound']:12}  {engines}")
        if p["pipeline_bubble_s"] > 0:
            lines.append(f"pipeline bubble  {_time(p['pipeline_bubble_s']):>9}")
        for c in p["collectives"]:
            lines.append(f"{c['name']:16} {c['count']:.0f} x {_time(c['s_each'])} over {c['ranks']} ranks "
                         f"({c['over']}), {c['bytes'] / 2**20:.3g} MiB each; exposed {_time(c['exposed_s'])}")
        lines.append(f"top ops ({t.trace_ops} traced on one rank):")
        for o in p["ops"][:top_ops]:
            lines.append(f"  {o['op']:52} {o['phase']:9} x{o['count']:<5} {_time(o['s']):>9}  "
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
    # Time per step, split into compute phases and exposed collectives.
    phases = []
    for t in e.targets:
        for ph in t.projection["phases"]:
            if ph["phase"] not in phases:
                phases.append(ph["phase"])
    bottom = [0.0] * len(names)
    for phase in phases + ["collectives (exposed)", "pipeline bubble"]:
        heights = []
        for t in e.targets:
            p = t.projection
            per_step = e.targets and (t.layout.microbatches if e.workload == "train" else t.layout.pp)
            if phase == "collectives (exposed)":
                h = sum(c["exposed_s"] for c in p["collectives"])
            elif phase == "pipeline bubble":
                h = p["pipeline_bubble_s"]
            else:
                h = sum(ph["compute_s"] + ph["launch_s"] for ph in p["phases"] if ph["phase"] == phase)
                h *= per_step if phase != "optimizer" else 1
            heights.append(h * 1e3)
        left.bar(names, heights, bottom=bottom, label=phase)
        bottom = [b + h for b, h in zip(bottom, heights)]
    left.set_ylabel("ms per step" if e.workload == "train" else "ms per output token")
    left.set_title("time per step")
    left.legend(fontsize=8)
    usd = [t.projection["usd_per_million_tokens"] or 0 for t in e.targets]
    right.bar(names, usd, color=["#ff9900" if not t.projection["gpu"] else "#76b900" for t in e.targets])
    right.set_ylabel("USD per 1M tokens")
    right.set_title("cost (0 = no price known)")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(_headline(e), fontsize=9)
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
        parts.append("<table><tr><th>phase</th><th>time</th><th>bound</th>"
                     + "".join(f"<th>{n}</th>" for n in _ENGINES) + "</tr>")
        for ph in p["phases"]:
            parts.append(f"<tr><td>{esc(ph['phase'])}</td><td>{_time(ph['s'])}</td><td>{esc(ph['bound'])}</td>"
                         + "".join(f"<td>{_time(ph['engine_s'][n])}</td>" for n in _ENGINES) + "</tr>")
        parts.append("</table><h3>Collectives</h3><table><tr><th>collective</th><th>over</th><th>ranks</th>"
                     "<th>MiB</th><th>calls</th><th>each</th><th>exposed</th></tr>")
        for c in p["collectives"]:
            parts.append(f"<tr><td>{esc(c['name'])}</td><td>{esc(c['over'])}</td><td>{c['ranks']}</td>"
                         f"<td>{c['bytes'] / 2**20:.4g}</td><td>{c['count']:.0f}</td><td>{_time(c['s_each'])}</td>"
                         f"<td>{_time(c['exposed_s'])}</td></tr>")
        parts.append("</table><h3>Ops (one rank)</h3><table><tr><th>op</th><th>phase</th><th>count</th>"
                     "<th>time</th><th>GFLOP</th><th>MiB</th></tr>")
        for o in p["ops"][:30]:
            parts.append(f"<tr><td>{esc(o['op'])}</td><td>{esc(o['phase'])}</td><td>{o['count']}</td>"
                         f"<td>{_time(o['s'])}</td><td>{o['flops'] / 1e9:.4g}</td><td>{o['bytes'] / 2**20:.4g}</td></tr>")
        parts.append("</table>")
        notes = list(t.notes) + [f"price: ${p['price_usd_per_hour']:.2f}/h ({p['price_source']})"]
        if t.unmodelled:
            notes.append("ops without a model (one Vector pass each): " + ", ".join(sorted(t.unmodelled)))
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(parts))
    return path
