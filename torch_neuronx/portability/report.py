"""The portability report: findings (what would differ on TorchNeuron 2.33, where, what to change)
as readable text and JSON."""

import json

WARNING = "warning"   # differs on TorchNeuron: strict mode makes it an error
INFO = "info"         # worth knowing, not an error in strict mode
IGNORED = "ignored"   # a warning the caller accepted (ignore=...): listed, not counted

# Categories, in the order the text report lists them.
CATEGORIES = (
    "cpu_fallback",
    "float64",
    "complex",
    "int64_range",
    "channels_last",
    "dynamic_shapes",
    "recompile",
    "dynamic_compile",
    "graph_break",
    "async_weight_loading",
    "int64",
    "channels_last_tensor",
)

TITLES = {
    "cpu_fallback": "ops outside TorchNeuron's native coverage (CPU fallback there)",
    "float64": "float64 tensors (TorchNeuron computes them in float32)",
    "complex": "complex tensors (TorchNeuron decomposes complex ops)",
    "int64_range": "int64 values beyond int32 (TorchNeuron computes int64 as int32)",
    "channels_last": "channels_last memory format (TorchNeuron raises)",
    "dynamic_shapes": "eager ops with changing shapes (a compile per shape on TorchNeuron)",
    "recompile": "torch.compile recompiles (static shapes only on TorchNeuron)",
    "dynamic_compile": "dynamic torch.compile (rejected by TorchNeuron)",
    "graph_break": "graph breaks",
    "async_weight_loading": "transformers asynchronous weight loading (hangs on TorchNeuron)",
    "int64": "int64 tensors (computed as int32 on TorchNeuron; values fit)",
    "channels_last_tensor": "channels-last strided tensors (contiguous or refused on TorchNeuron)",
}


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""


class PortabilityError(RuntimeError):
    """Raised in strict mode when the run has findings: the code would behave differently (or
    fail) on TorchNeuron 2.33. ``report`` holds the full :class:`PortabilityReport`."""

    def __init__(self, report):
        self.report = report
        super().__init__(
            "strict portability check (TORCH_NEURONX_PORTABILITY_STRICT / strict=True): "
            f"{len(report.warnings)} finding(s) would differ on TorchNeuron 2.33\n" + report.text())


class Finding:
    """One thing that would differ, at one place in the user's code."""

    __slots__ = ("category", "severity", "subject", "where", "function", "via", "count",
                 "message", "fix", "details", "host_bytes")

    def __init__(self, category, severity, subject, site, message, fix):
        self.category = category
        self.severity = severity
        self.subject = subject
        self.where = site.where
        self.function = site.function
        self.via = site.via
        self.count = 0
        self.message = message
        self.fix = fix
        self.details: dict = {}
        # CPU fallbacks: bytes of neuron tensors the fallback copies to the host and back.
        self.host_bytes = 0

    @property
    def file(self) -> str:
        return self.where.rsplit(":", 1)[0]

    @property
    def line(self) -> int:
        try:
            return int(self.where.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            return 0

    def as_dict(self) -> dict:
        out = {
            "category": self.category,
            "severity": self.severity,
            "subject": self.subject,
            "where": self.where,
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "via": self.via,
            "count": self.count,
            "message": self.message,
            "fix": self.fix,
        }
        if self.host_bytes:
            out["host_bytes"] = self.host_bytes
        if self.details:
            out["details"] = {k: sorted(v) if isinstance(v, set) else v
                              for k, v in self.details.items()}
        return out

    def __repr__(self) -> str:
        return f"Finding({self.category}, {self.subject!r}, {self.where}, x{self.count})"


class PortabilityReport:
    """What the run would do differently on TorchNeuron 2.33.

    ``findings``: every :class:`Finding`; ``warnings``: those that differ (errors in strict mode);
    ``summary``: counts (ops checked, eager compile units, compile metrics here and on
    TorchNeuron). ``text()`` and ``to_json()`` render it; ``str(report)`` is the text.
    """

    def __init__(self, findings, summary, strict: bool):
        order = {c: i for i, c in enumerate(CATEGORIES)}
        self.findings = sorted(
            findings, key=lambda f: (order.get(f.category, len(order)), f.file, f.line, f.subject))
        self.summary = summary
        self.strict = strict

    @property
    def warnings(self) -> list:
        return [f for f in self.findings if f.severity == WARNING]

    def by_category(self, category: str) -> list:
        return [f for f in self.findings if f.category == category]

    def __bool__(self) -> bool:
        return bool(self.warnings)

    def __len__(self) -> int:
        return len(self.findings)

    def __iter__(self):
        return iter(self.findings)

    def as_dict(self) -> dict:
        counts: dict = {}
        for finding in self.warnings:
            counts[finding.category] = counts.get(finding.category, 0) + 1
        return {
            "target": "TorchNeuron 2.33 (torch-neuronx 2.13.3.0 / 2.14.3.0)",
            "strict": self.strict,
            "warnings": len(self.warnings),
            "by_category": counts,
            "summary": self.summary,
            "findings": [f.as_dict() for f in self.findings],
        }

    def to_json(self, indent: int = 1) -> str:
        return json.dumps(self.as_dict(), indent=indent)

    def text(self) -> str:
        lines = []
        warnings = self.warnings
        head = (f"TorchNeuron 2.33 portability report: {len(warnings)} finding(s)"
                if warnings else "TorchNeuron 2.33 portability report: nothing would differ")
        lines.append(head)
        counts: dict = {}
        for finding in warnings:
            counts[finding.category] = counts.get(finding.category, 0) + 1
        if counts:
            lines.append("  by category: " + ", ".join(
                f"{c} {counts[c]}" for c in CATEGORIES if c in counts))
        s = self.summary
        lines.append(
            f"  checked {s.get('eager_op_calls', 0)} eager op calls on neuron "
            f"({s.get('eager_ops', 0)} distinct ops, {s.get('eager_compile_units', 0)} distinct "
            f"op/shape/dtype combinations = eager compiles on TorchNeuron)")
        compiled = s.get("compile")
        if compiled:
            lines.append(
                f"  torch.compile: {compiled['graphs']} graphs, {compiled['programs']} programs, "
                f"{compiled['recompiles']} recompiles here; on TorchNeuron "
                f"{compiled['torchneuron_programs']} programs, "
                f"{compiled['torchneuron_recompiles']} recompiles; "
                f"{compiled['graph_breaks']} graph breaks")
        coverage = s.get("coverage")
        if coverage:
            lines.append(f"  op coverage: {coverage['file']} ({coverage['native_ops']} native ops, "
                         f"source {coverage['repository']} @ {coverage['commit'][:12]}, "
                         f"{coverage['commit_date']})")
        for category in CATEGORIES:
            group = self.by_category(category)
            if not group:
                continue
            lines.append("")
            lines.append(f"[{category}] {TITLES.get(category, category)}")
            for finding in group:
                times = f"  ({finding.count}x)" if finding.count > 1 else ""
                if finding.host_bytes:
                    times += f"  [{_size(finding.host_bytes)} through the host]"
                where = finding.where + (f" in {finding.function}" if finding.function else "")
                mark = " [ignored]" if finding.severity == IGNORED else ""
                lines.append(f"  {where}{times}: {finding.subject}{mark}")
                lines.append(f"    {finding.message}")
                if finding.via:
                    lines.append(f"    via {finding.via}")
                if finding.severity == WARNING:
                    lines.append(f"    fix: {finding.fix}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"PortabilityReport({len(self.warnings)} warnings, {len(self.findings)} findings)"

    def raise_if_findings(self) -> None:
        if self.warnings:
            raise PortabilityError(self)
