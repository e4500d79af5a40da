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


# --- the layouts of neuron kernels' outputs, where torch's meta functions say others ----------------
#
# A trace on fake tensors lays each op's outputs out as torch's meta function for the op does.
# Where neuron's kernel returns another layout, what follows the op differs: a reshape that is a
# view of eager's output is a copy of the meta function's. The one such kernel is the fused
# attention (csrc/backend/ops/Attention.cpp): it computes with ATen's CPU flash attention and
# returns its outputs as that lays them out, which torch's meta functions for ATen's CPU flash ops
# state -- the output laid out as the query, the logsumexp (batch, query, heads)-major, each
# gradient (batch, sequence, heads, head_dim)-major -- while torch's meta functions for the
# overrideable ops, which neuron registers its kernels for, lay the logsumexp out contiguous and
# each gradient as its input. (tests/work/test_kernel_layouts.py holds eager's outputs to this.)
#
# Only traces on fake tensors (estimate/_trace.py) take these layouts. Compiled programs keep the
# overrideable ops' meta layouts: a meta function is one per op, for every device alike, AOTAutograd
# and Inductor plan a program's graph and buffers with it, and the program kernels return its
# layouts (Attention.cpp, in_layout_of), so program_work prices a program's graph as it runs.


def _abstract(t: torch.Tensor) -> bool:
    """A tensor without data (meta or fake): its layout is the meta function's, not a kernel's."""
    return t.is_meta or torch._subclasses.fake_tensor.is_fake(t)


def _fused_attention(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
                     return_debug_mask=False, *, scale=None):
    op = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    outputs = list(op(query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask,
                      scale=scale))
    if not _abstract(query):
        return tuple(outputs)  # the kernel ran: its outputs are laid out as it lays them out
    mask = attn_bias if attn_bias is not None and attn_bias.numel() > 0 else None
    outputs[:2] = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(
        query, key, value, dropout_p, is_causal, attn_mask=mask, scale=scale)
    return tuple(outputs)


def _fused_attention_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out,
                              logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                              philox_seed, philox_offset, *, scale=None):
    op = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward.default
    outputs = list(op(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                      cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
                      philox_offset, scale=scale))
    if not _abstract(query):
        return tuple(outputs)
    mask = attn_bias if attn_bias is not None and attn_bias.numel() > 0 else None
    outputs[:3] = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask=mask,
        scale=scale)
    return tuple(outputs)


_IN_KERNEL_LAYOUTS = {
    "aten::_scaled_dot_product_fused_attention_overrideable": _fused_attention,
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": _fused_attention_backward,
}


def in_kernel_layouts(func):
    """A callable taking `func`'s arguments that returns its outputs laid out as neuron's kernel
    lays them out (on real tensors the kernel's own outputs; on fake or meta tensors, the layouts
    it would return), or None when torch's meta function for `func` already does."""
    return _IN_KERNEL_LAYOUTS.get(func.name())
