"""Trainium legality of a compiled graph: what TorchNeuron's compile path (FX -> StableHLO ->
neuronx-cc, research/torchneuron.md §2.4, §2.7; research/trainium_nki.md §1.5) would change or
refuse in it. Our programs run these graphs as they are; the report says what would differ on
the hardware, per program, in ``get_dynamo_metrics()["trainium_legality"]`` and as a warning.

Checked, from the graph's values (FX node metadata) -- every input, intermediate and output:

- float64: no 64-bit floating point on NeuronCores; TorchNeuron computes it as float32 (a
  precision loss). Warned.
- complex: neuronx-cc rejects complex dtypes (NCC_EVRF004); TorchNeuron decomposes complex ops
  into real ones (TORCH_NEURONX_COMPLEX_DECOMPOSE) and down-casts complex128. Warned.
- data-dependent sizes (unbacked symbolic sizes: nonzero, masked_select, unique, ...): TorchNeuron's
  DynamicShapeAnalysis raises on any symbolic dimension, so the graph would not compile there.
  Warned.
- int64: computed as int32 on Trainium, exact while values stay within +-2**31. Reported in the
  metrics only: every language model's token ids and positions are int64, and a warning per
  graph for them would be noise.

Checked from the graph's ops:

- ops without a Neuron kernel in TorchNeuron 2.33 (its eager op coverage,
  portability/coverage.py: they run only through its CPU fallback there). Which ops neuronx-cc
  lowers in a compiled graph is not public; an op TorchNeuron has no kernel for is the best
  evidence there is that its compile path lacks a lowering too, and a graph that does not lower
  fails to compile there (TorchNeuron 2.33's default). Reported in the metrics only, being
  evidence, not certainty.
"""

import warnings

import torch

from ..portability import coverage

WARNED = ("float64", "complex", "data_dependent_shape")

_WHAT = {
    "float64": "float64 values (Trainium computes them as float32: precision loss)",
    "complex": "complex values (neuronx-cc rejects complex dtypes; TorchNeuron decomposes complex "
               "ops into real ones and down-casts complex128)",
    "data_dependent_shape": "data-dependent sizes (TorchNeuron's dynamic-shape analysis rejects "
                            "graphs with symbolic dimensions)",
    "int64": "int64 values (computed as int32: exact within +-2**31)",
    "no_torchneuron_kernel": "ops TorchNeuron 2.33 has no Neuron kernel for (CPU fallback in its "
                             "eager mode; its compiler may not lower them)",
}

_FIX = {
    "float64": "cast to float32 (model.float(), dtype=torch.float32)",
    "complex": "use real tensors (e.g. cos/sin pairs instead of torch.polar)",
    "data_dependent_shape": "use fixed-size masks (torch.where) instead of nonzero/masked_select",
}


def _values(node):
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return [v for v in val if isinstance(v, torch.Tensor)]
    return [val] if isinstance(val, torch.Tensor) else []


def _is_unbacked(size) -> bool:
    if not isinstance(size, torch.SymInt):
        return False
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return bool(free_unbacked_symbols(size))


def _without_torchneuron_kernel(op) -> bool:
    """An ATen op TorchNeuron 2.33 runs only through its CPU fallback (a structured op: when
    its out= form is such an op)."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return False
    name = coverage.reaching_torchneuron(op)
    return name is not None and coverage.classify(name) == coverage.CPU_FALLBACK


def check(gm: torch.fx.GraphModule) -> dict:
    """Issue kind -> {"count": values, "ops": the first few ops (or inputs) producing them}."""
    found: dict = {}

    def note(kind, node):
        entry = found.setdefault(kind, {"count": 0, "ops": []})
        entry["count"] += 1
        where = (f"input {node.name}" if node.op == "placeholder" else
                 getattr(node.target, "__name__", str(node.target)))
        if where not in entry["ops"] and len(entry["ops"]) < 5:
            entry["ops"].append(where)

    for node in gm.graph.nodes:
        if node.op not in ("placeholder", "call_function"):
            continue
        if node.op == "call_function" and _without_torchneuron_kernel(node.target):
            note("no_torchneuron_kernel", node)
        for value in _values(node):
            if value.dtype == torch.float64:
                note("float64", node)
            elif value.dtype.is_complex:
                note("complex", node)
            elif value.dtype == torch.int64:
                note("int64", node)
            if any(_is_unbacked(s) for s in value.shape):
                note("data_dependent_shape", node)
    return found


def report(name: str, found: dict) -> None:
    """Warn about what would not carry over to Trainium (int64 is in the metrics only)."""
    warned = [k for k in WARNED if k in found]
    if not warned:
        return
    lines = [f"  - {_WHAT[k]}: {found[k]['count']} in {', '.join(found[k]['ops'])}; "
             f"fix: {_FIX[k]}" for k in warned]
    warnings.warn(
        f"torch.compile(backend='neuron'): program {name} runs here but would differ on "
        f"Trainium (TorchNeuron):\n" + "\n".join(lines), stacklevel=3)
