"""Which launches an ATen op call makes on neuron, as eager runs it: the Python side of the op-work
table (csrc/backend/core/OpWork.h), shared by the estimate's tracer (estimate/_trace.py) and
compiled programs (dynamo/program_work.py), so that both count the ops eager launches.

An op with a neuron kernel of its own (a PrivateUse1 kernel: a host-math family, a dedicated
kernel) is one launch, whose work the table gives. An op without one runs as its composite
kernel's parts — CompositeImplicitAutograd (decomposed above autograd), CompositeExplicitAutograd
(e.g. embedding -> index_select, slice_backward -> zeros + copy) or, for the in-place form of a
structured op, CompositeExplicitAutogradNonFunctional (index_copy_ -> index_copy.out with out=self)
— exactly as the dispatcher runs it on neuron tensors; its parts are counted in turn. An op with neither is the CPU fallback.
"""

from __future__ import annotations

import torch

_DK = torch._C.DispatchKey


def _has_kernel(func, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)


# Composites whose kernel, for a neuron tensor, is one call of a neuron kernel chosen by the
# tensors' device: copy_ (CompositeExplicitAutograd) calls neuron's _copy_from, one launch whose
# work the table gives for copy_ alike. A trace on meta tensors cannot follow that choice (on
# meta, copy_'s composite returns without copying, and _copy_from has no meta kernel), so these
# count as the one launch they make.
_RUNS_AS = {"aten::copy_": "aten::_copy_from"}


def runs_whole(func) -> bool:
    """Whether neuron runs `func` as one launch of its own kernel."""
    launched = _RUNS_AS.get(func.name())
    if launched is not None:
        return torch._C._dispatch_has_kernel_for_dispatch_key(launched, "PrivateUse1")
    return _has_kernel(func, "PrivateUse1")


def returns_alias(func) -> bool:
    """A view (or an alias of an argument): it moves no data."""
    for ret in func._schema.returns:
        info = ret.alias_info
        if info is not None and not info.is_write:
            return True
    return False


def composite_parts(func):
    """The composite kernel eager runs `func` as (a callable taking func's arguments, dispatching
    its parts), or None when neuron runs `func` whole or through the CPU fallback."""
    if runs_whole(func) or func.namespace != "aten":
        return None  # (prims and other libraries' ops never reach neuron's dispatch as parts)
    if _has_kernel(func, "CompositeImplicitAutograd"):
        return func.decompose
    if _has_kernel(func, "CompositeExplicitAutograd"):
        return lambda *args, **kwargs: func._op_dk(_DK.CompositeExplicitAutograd, *args, **kwargs)
    if _has_kernel(func, "CompositeExplicitAutogradNonFunctional"):
        # The in-place form of a structured op (index_copy_, add_): its .out overload with out=self.
        return lambda *args, **kwargs: func._op_dk(_DK.CompositeExplicitAutogradNonFunctional,
                                                   *args, **kwargs)
    return None
