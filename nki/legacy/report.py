"""The migration report: every construct of the legacy ``neuronxcc.nki`` API a kernel used, at
the kernel's file:line, with its NKI 0.6 spelling. Entries are recorded while a kernel
specialises (and for harness calls like nki.baremetal around it) and printed once per kernel and
process to stderr; ``kernel.migration_report()`` returns them."""

from __future__ import annotations

import sys

from nki import _core

_pending = []  # uses outside a kernel's trace (decorators, harness calls, imports)
_printed = set()


def use(construct, spelling):
    """Records that `construct` was used at the caller's line; `spelling` is the NKI 0.6 way."""
    file, line = _core.caller_location()
    entry = (file, line, construct, spelling)
    tracer = _core.current_tracer(optional=True)
    target = getattr(tracer, "legacy_uses", None) if tracer is not None else None
    (target if target is not None else _pending).append(entry)


def take_pending():
    out = list(_pending)
    _pending.clear()
    return out


def unique(entries):
    seen, out = set(), []
    for e in entries:
        if e[:3] not in seen:
            seen.add(e[:3])
            out.append(e)
    return out


def format_report(kernel_name, entries):
    lines = [f"NKI migration report for kernel '{kernel_name}' (neuronxcc.nki -> nki 0.6): "
             f"{len(entries)} legacy construct(s)"]
    for file, line, construct, spelling in sorted(entries, key=lambda e: (e[0], e[1])):
        lines.append(f"  {file}:{line}: {construct} -> {spelling}")
    return "\n".join(lines)


def print_once(kernel_name, key, entries):
    if not entries or key in _printed:
        return
    _printed.add(key)
    print(format_report(kernel_name, entries), file=sys.stderr)
