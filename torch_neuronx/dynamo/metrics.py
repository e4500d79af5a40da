"""Compile metrics of ``torch.compile(backend="neuron")``: TorchNeuron's ``get_dynamo_metrics()``
and ``reset_dynamo_metrics()``."""

import copy
import threading

_lock = threading.Lock()


def _fresh() -> dict:
    return {
        "graphs": 0,              # Dynamo graphs handed to the backend (one per frame compile)
        "programs": 0,            # forward, backward and inference programs compiled
        "cpp_wrapper_programs": 0,  # of them, those whose kernels a C++ wrapper calls
        # of those, the ones launched with one call from Python into C++ (the launcher calls the
        # wrapper's entry itself, with no Python in between)
        "direct_cpp_programs": 0,
        "compiles": 0,            # programs compiled by Inductor (cache misses)
        "cache_hits": 0,          # programs served by the persistent program (NEFF) cache
        "cache_misses": 0,
        "cache_corrupted": 0,     # cache entries found truncated/corrupted (removed, rebuilt)
        "cache_lock_timeouts": 0,  # cache locks not obtained in time (compiled without)
        "recompiles": 0,          # Dynamo compiling a frame again after a guard failed
        "recompile_reasons": [],  # the failed guard of each recompile
        "graph_breaks": 0,
        "graph_break_reasons": [],
        "compile_seconds": 0.0,   # time spent in the backend (AOTAutograd and Inductor)
        "fallback_graphs": 0,     # graphs that could not compile and ran eagerly
        "program_launches": 0,    # compiled programs run (one launch record each)
        # Per program with something Trainium would compute differently or refuse (legality.py):
        # {"program": name, "issues": {kind: {"count": n, "ops": [...]}}}, and how many of them
        # have a warned issue (float64, complex, data-dependent sizes).
        "trainium_legality": [],
        "trainium_flagged_programs": 0,
        # What the same run would cost on TorchNeuron, which compiles static shapes only: every
        # new shape a symbolic program serves would be another program and, for a forward or
        # inference graph, another recompile of its frame.
        "torchneuron_programs": 0,
        "torchneuron_recompiles": 0,
    }


_metrics = _fresh()
_static_shape_extra = {"programs": 0, "recompiles": 0}
# Dynamo's graph-break counter is process-wide and shared with other backends: metrics report
# what happened since the last reset.
_graph_break_baseline: dict = {}


def _graph_break_counter():
    # Imported on use: torch_neuronx exports these functions, and importing Dynamo at
    # `import torch` time would slow every program down.
    from torch._dynamo.utils import counters

    return counters["graph_break"]


def _graph_breaks_since_reset() -> tuple:
    current = _graph_break_counter()
    reasons = []
    total = 0
    for reason, count in current.items():
        new = count - _graph_break_baseline.get(reason, 0)
        if new > 0:
            total += new
            reasons.append(reason)
    return total, reasons


def record(key: str, amount=1) -> None:
    with _lock:
        _metrics[key] += amount


def record_static_shape_recompile(frame: bool) -> None:
    with _lock:
        _static_shape_extra["programs"] += 1
        if frame:
            _static_shape_extra["recompiles"] += 1


def record_recompile(reason: str) -> None:
    with _lock:
        _metrics["recompiles"] += 1
        _metrics["recompile_reasons"].append(reason)


def record_legality(program: str, issues: dict, flagged: bool) -> None:
    with _lock:
        _metrics["trainium_legality"].append({"program": program, "issues": issues})
        if flagged:
            _metrics["trainium_flagged_programs"] += 1


def get_dynamo_metrics() -> dict:
    """What ``torch.compile(backend="neuron")`` did since the start or the last
    :func:`reset_dynamo_metrics`: Dynamo graphs compiled, programs (forward/backward/inference)
    compiled or served from the program cache, recompiles with the guard that failed, graph breaks
    with their reasons, seconds spent compiling, graphs that fell back to eager execution,
    programs launched, what the same run would cost on TorchNeuron (static shapes only:
    ``torchneuron_programs``, ``torchneuron_recompiles``) and what Trainium would compute
    differently or refuse per program (``trainium_legality``). A copy: later compiles do not change
    it."""
    with _lock:
        snapshot = copy.deepcopy(_metrics)
        snapshot["torchneuron_programs"] = snapshot["programs"] + _static_shape_extra["programs"]
        snapshot["torchneuron_recompiles"] = (
            snapshot["recompiles"] + _static_shape_extra["recompiles"])
    breaks, reasons = _graph_breaks_since_reset()
    snapshot["graph_breaks"] = breaks
    snapshot["graph_break_reasons"] = reasons
    return snapshot


def reset_dynamo_metrics() -> None:
    """Start the metrics afresh (compiled programs stay cached)."""
    global _metrics
    with _lock:
        _metrics = _fresh()
        _static_shape_extra.update(programs=0, recompiles=0)
        _graph_break_baseline.clear()
        _graph_break_baseline.update(_graph_break_counter())
