"""Which ops the fuzzer runs: every OpInfo whose call reaches a native neuron kernel.

The list is derived, not written: the kernels are the dispatcher's PrivateUse1 registrations
(``torch._C._dispatch_get_registrations_for_dispatch_key``), and an OpInfo (PyTorch's op_db and
its foreach lists) counts as native when its first samples, run on neuron, run at least one
registered ATen overload that computes something natively (neuron's op tracking tells which ran,
and which of those went through the CPU fallback; memory plumbing such as ``empty_strided`` or
``_copy_from`` does not count: every op reaches it). A kernel registered
tomorrow is fuzzed tomorrow, through whichever OpInfo reaches it; the session summary lists the
registered overloads no fuzzed call reached.

Each OpInfo falls in one family, which says how the fuzzer builds its calls:
- unary: elementwise unary ufuncs; the fuzzer draws shapes and values in the op's domain.
- binary: elementwise binary ufuncs; broadcast shapes, mixed dtypes, CPU scalar operands.
- reduction: reductions; shapes, dims and keepdim.
- samples: every other op; its OpInfo samples, with their tensors laid out anew.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import torch
from torch.testing._internal.common_methods_invocations import (
    foreach_binary_op_db,
    foreach_other_op_db,
    foreach_pointwise_op_db,
    foreach_reduce_op_db,
    foreach_unary_op_db,
    op_db,
)
from torch.testing._internal.opinfo.core import BinaryUfuncInfo, ReductionOpInfo, UnaryUfuncInfo

import torch_neuronx
from parity import StorageCopier

# The dtypes the fuzzer draws from (intersected with each OpInfo's CPU dtypes).
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.complex64,
          torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8, torch.bool)

# Registered overloads every op reaches (allocation, copies, views, resizing, scalar reads):
# tested by the fuzzer through every op, but reaching them says nothing about an op being native.
PLUMBING = {
    "empty", "empty_strided", "_copy_from", "_copy_from_and_resize", "view", "as_strided",
    "_reshape_alias", "resize_", "set_", "_local_scalar_dense", "record_stream",
    "_has_compatible_shallow_copy_type", "fill_", "zero_", "copy_", "unfold", "view_as_real",
    "view_as_complex",
}


def registered_overloads() -> set[str]:
    """'aten::name.overload' of every ATen kernel registered for the neuron (PrivateUse1) key."""
    return {
        name for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
        if name.startswith("aten::")
    }


def _base(overload: str) -> str:
    return overload.removeprefix("aten::").split(".")[0]


def family(op) -> str:
    if isinstance(op, UnaryUfuncInfo):
        return "unary"
    if isinstance(op, BinaryUfuncInfo):
        return "binary"
    if isinstance(op, ReductionOpInfo):
        return "reduction"
    return "samples"


def test_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def fuzz_dtypes(op) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    return [d for d in DTYPES if d in supported]


@functools.cache
def native_ops() -> list:
    """The OpInfos whose calls reach a computing neuron kernel, in op_db order: their first
    samples run on neuron, and the ATen ops that ran natively (neuron's op tracking: executed,
    not through the CPU fallback) are looked up among the registrations."""
    registered = registered_overloads()
    computing = {o for o in registered if _base(o) not in PLUMBING}
    chosen = []
    every = itertools.chain(op_db, foreach_unary_op_db, foreach_binary_op_db,
                            foreach_pointwise_op_db, foreach_reduce_op_db, foreach_other_op_db)
    for op in every:
        dtypes = fuzz_dtypes(op)
        if not dtypes:
            continue
        dtype = torch.float32 if torch.float32 in dtypes else dtypes[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                samples = list(itertools.islice(op.sample_inputs("cpu", dtype), 2))
            except Exception:  # noqa: BLE001 - an OpInfo whose generator fails has no samples
                continue
            copier = StorageCopier("neuron")
            torch_neuronx.clear_op_tracking()
            for sample in samples:
                try:
                    op(copier(sample.input), *copier(tuple(sample.args)),
                       **copier(dict(sample.kwargs)))
                except Exception:  # noqa: BLE001 - a refused sample still shows what it reached
                    pass
        ran = set(torch_neuronx.get_executed_ops()) - set(torch_neuronx.get_fallback_ops())
        if ran & computing:
            chosen.append(op)
    torch_neuronx.clear_op_tracking()
    return chosen
