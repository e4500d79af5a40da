"""What TorchNeuron 2.33 runs natively in eager mode, read from
``torch_neuronx/data/torchneuron_2_33_coverage.json`` (its source and method are in the file)."""

import functools
import json
import os

import torch

from torch_neuronx import _env

COVERAGE_FILE = _env.data_file("torchneuron_2_33_coverage.json")

NATIVE = "native"
COMPOSITE = "composite"          # not listed, but runs PyTorch's composite kernel there too
CPU_FALLBACK = "cpu_fallback"    # TorchNeuron's catch-all (or explicit) CPU fallback
OUT_VARIANT = "out_variant"      # runs the op's out= form there (a structured op)


@functools.lru_cache(None)
def load() -> dict:
    with open(COVERAGE_FILE) as handle:
        return json.load(handle)


@functools.lru_cache(None)
def _tables():
    data = load()
    exact = set(data["native"])
    # An entry without an overload covers every overload of the op (see the file's "matching").
    base = {name for name in exact if "." not in name.split("::", 1)[1]}
    fallback = set(data["cpu_fallback_registered"])
    silent = set(data["silent_fallback_view_ops"])
    return exact, base, fallback, silent


def _base(name: str) -> str:
    namespace, rest = name.split("::", 1)
    return f"{namespace}::{rest.split('.', 1)[0]}"


@functools.lru_cache(None)
def classify(name: str) -> str:
    """NATIVE, COMPOSITE, OUT_VARIANT or CPU_FALLBACK for an ATen op name
    (``aten::add.Tensor``; the default overload is written without one, ``aten::relu``, as
    ``OpOverload.name()`` gives it)."""
    exact, base, fallback, _ = _tables()
    if name in fallback or _base(name) in fallback:
        return CPU_FALLBACK
    if name in exact or _base(name) in base:
        return NATIVE
    # TorchNeuron registers no composite keys, so an op PyTorch implements with a
    # CompositeExplicitAutograd kernel runs that kernel there (its parts dispatch on their own).
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd"):
        return COMPOSITE
    # A structured op's functional / in-place form: its default kernel allocates the result and
    # calls the out= form, which is what reaches TorchNeuron.
    if torch._C._dispatch_has_kernel_for_dispatch_key(
            name, "CompositeExplicitAutogradNonFunctional"):
        return OUT_VARIANT
    return CPU_FALLBACK


@functools.lru_cache(None)
def out_variant(func):
    """The out= overload a structured op's functional or in-place form delegates to
    (``aten::cumprod`` -> ``aten::cumprod.out``, ``aten::sort.stable`` ->
    ``aten::sort.values_stable``), or None."""
    packet_name = func._schema.name.split("::", 1)[1].rstrip("_")
    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None:
        return None
    wanted = [a.name for a in func._schema.arguments if not a.is_out]
    for overload in packet.overloads():
        schema = getattr(packet, overload)._schema
        outs = [a for a in schema.arguments if a.is_out]
        if outs and [a.name for a in schema.arguments if not a.is_out] == wanted:
            return getattr(packet, overload).name()
    return None


def reaching_torchneuron(func):
    """The name of the ATen op TorchNeuron receives when `func` runs there: `func` itself, or
    for a structured op's functional or in-place form its out= form; None when PyTorch's
    composite kernel runs there instead (its parts reach TorchNeuron on their own)."""
    name = func.name()
    kind = classify(name)
    if kind == OUT_VARIANT:
        return out_variant(func)
    return None if kind == COMPOSITE else name


@functools.lru_cache(None)
def is_host_op(name: str) -> bool:
    """Ops TorchNeuron implements in C++ on tensor metadata or its allocator (empty, views,
    resize_, scalar reads): no compile, so a new shape costs nothing there."""
    origins = load()["native"].get(name)
    return bool(origins) and all(o.endswith(".cpp") for o in origins)


def is_silent_fallback(name: str) -> bool:
    """TorchNeuron's CPU fallback does not warn for these view ops."""
    return _base(name) in _tables()[3]


def source_summary() -> dict:
    data = load()
    source = data["source"]
    return {
        "file": os.path.basename(COVERAGE_FILE),
        "release": data["torchneuron_release"],
        "repository": source["repository"],
        "commit": source["commit"],
        "commit_date": source["commit_date"],
        "native_ops": len(data["native"]),
    }
