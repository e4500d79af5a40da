"""Fused attention inside compiled programs.

On neuron tensors ``scaled_dot_product_attention`` takes PyTorch's "overrideable" fused backend
(csrc/backend/ops/Attention.cpp): one kernel forward and one backward, computed by ATen's CPU
flash attention on the device buffers. A program is CPU code over host views, and ATen's
overrideable attention ops have no CPU kernel (their default raises), so this module gives them
one: the same computation the eager neuron kernel runs (ATen's CPU flash attention, the
gradient of a float mask as the eager kernel computes it). The forward's is C++
(csrc/backend/compiler/ProgramAttention.cpp, cheaper per call); the backward's is here. Graphs therefore keep the fused
attention op, which Inductor calls as an external kernel, instead of the matmuls and softmax of
the math backend: the same algorithm and rounding as eager neuron, and flash attention's speed
on long sequences and the KV cache of a decode step. In a program's CPU graph the op then becomes
ATen's own CPU flash attention op wherever that computes every output the graph uses
(``use_cpu_attention_ops`` below, for Inductor's C++ wrapper); the kernels registered here serve
the rest (the mask's gradient, the forward's other outputs).

A CPU kernel for these ops serves nothing else: no CPU code path selects the overrideable
backend (the CPU's own SDPA choice never returns it).
"""

import math
import operator

import torch

_library = None


def _in_layout(result, like):
    """`result` in `like`'s layout (a copy only when the kernel chose another one)."""
    if result.stride() == like.stride():
        return result
    return like.copy_(result)


def _mask_gradient(grad_out, query, key, value, mask, logsumexp, is_causal, scale):
    """dL/dM for an additive float mask M of S = scale * Q K^T + M: P * (dP - rowsum(P * dP)),
    P = exp(S - logsumexp), dP = dO V^T, summed over M's broadcast dims (as the eager kernel)."""
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    keys, values = key.to(acc), value.to(acc)
    group = query.size(1) // key.size(1)  # grouped-query heads share a key/value head
    if group > 1:
        keys = keys.repeat_interleave(group, 1)
        values = values.repeat_interleave(group, 1)
    softmax_scale = scale if scale is not None else 1.0 / math.sqrt(query.size(-1))
    scores = (query.to(acc) @ keys.transpose(-2, -1)) * softmax_scale + mask.to(acc)
    if is_causal:
        future = torch.ones(query.size(2), key.size(2), dtype=torch.bool).triu_(1)
        scores = scores.masked_fill(future, -math.inf)
    lse = logsumexp.to(acc).unsqueeze(-1)
    probs = torch.where(torch.isinf(lse) & (lse < 0), torch.zeros((), dtype=acc),
                        (scores - lse).exp())
    grad_probs = grad_out.to(acc) @ values.transpose(-2, -1)
    grad_scores = probs * (grad_probs - (probs * grad_probs).sum(-1, keepdim=True))
    return grad_scores.sum_to_size(mask.shape).to(mask.dtype)


def _backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
              cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
              philox_offset, *, scale=None):
    has_mask = attn_bias is not None and attn_bias.numel() > 0
    mask = attn_bias if has_mask else None
    grad_q, grad_k, grad_v = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask=mask,
        scale=scale)
    # Gradients laid out as their inputs (the meta kernel's empty_like).
    grad_q = _in_layout(grad_q, torch.empty_like(query))
    grad_k = _in_layout(grad_k, torch.empty_like(key))
    grad_v = _in_layout(grad_v, torch.empty_like(value))
    grad_mask = None
    if grad_input_mask[3] and has_mask:
        if not mask.is_floating_point():
            raise RuntimeError(
                f"neuron fused attention: a gradient was requested for an attn_mask of dtype "
                f"{mask.dtype}; only a float mask (added to the scores) has one")
        grad_mask = _mask_gradient(grad_out, query, key, value, mask, logsumexp, is_causal,
                                   scale)
    return grad_q, grad_k, grad_v, grad_mask


def register() -> None:
    """Give ATen's overrideable attention backward its CPU kernel (once per process)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("aten", "IMPL")
    # The forward's CPU kernel is C++ (csrc/backend/compiler/ProgramAttention.cpp, registered
    # when torch_neuronx._C loads): a decode step calls it once per layer, and as a Python kernel
    # its call cost more than the attention at that size.
    library.impl("_scaled_dot_product_fused_attention_overrideable_backward", _backward, "CPU")
    _library = library


_FORWARD_ARGS = ("query", "key", "value", "attn_bias", "dropout_p", "is_causal",
                 "return_debug_mask")
_FORWARD_DEFAULTS = {"attn_bias": None, "dropout_p": 0.0, "is_causal": False,
                     "return_debug_mask": False, "scale": None}
_BACKWARD_ARGS = ("grad_out", "query", "key", "value", "attn_bias", "grad_input_mask", "out",
                  "logsumexp", "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p",
                  "is_causal", "philox_seed", "philox_offset")


def use_cpu_attention_ops(gm: torch.fx.GraphModule) -> bool:
    """In a program's CPU graph, ATen's overrideable fused attention becomes ATen's own CPU flash
    attention ops (`_scaled_dot_product_flash_attention_for_cpu` and its backward): the kernels
    the CPU kernels of this module run, which Inductor knows natively. That matters in Inductor's
    C++ wrapper mode, which calls ATen ops through their C shims, past the dispatcher and so past
    a kernel registered for the overrideable ops. Where the forward's other outputs are used (a
    training forward saves them for the backward) they become what the registered kernel returns
    for them: 0-dim philox seed and offset, the query and key lengths. Returns whether the graph
    has no overrideable attention op left: one with dropout or a debug mask stays, and so does a
    backward whose mask gradient is used."""
    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    fused_backward = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward.default
    all_rewritten = True
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is fused:
            all_rewritten &= _forward_to_cpu_op(gm.graph, node)
        elif node.op == "call_function" and node.target is fused_backward:
            all_rewritten &= _backward_to_cpu_op(gm.graph, node)
    return all_rewritten


def _arguments(node, names, defaults):
    return dict(defaults, **dict(zip(names, node.args)), **node.kwargs)


def _outputs_used(node):
    """The output indices a multi-output node's users take, or None if one is not a getitem."""
    if not all(u.op == "call_function" and u.target is operator.getitem for u in node.users):
        return None
    return {u.args[1] for u in node.users}


def _replace_outputs(graph, node, make):
    """Each getitem user of `node` replaced by make(index) (a node built before the user)."""
    for user in list(node.users):
        with graph.inserting_before(user):
            new = make(user.args[1])
        new.meta.update({k: v for k, v in user.meta.items() if k != "val"})
        user.replace_all_uses_with(new)
        graph.erase_node(user)
    graph.erase_node(node)


def _forward_to_cpu_op(graph, node) -> bool:
    args = _arguments(node, _FORWARD_ARGS, _FORWARD_DEFAULTS)
    used = _outputs_used(node)
    # Outputs: 0 output, 1 logsumexp, 2-3 cumulative lengths (undefined), 4-5 max_q and max_k,
    # 6-7 philox seed and offset, 8 debug mask (undefined).
    if args["dropout_p"] != 0.0 or args["return_debug_mask"] or used is None or \
            not used <= {0, 1, 4, 5, 6, 7}:
        return False
    with graph.inserting_before(node):
        flash = graph.call_function(
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
            (args["query"], args["key"], args["value"]),
            {"dropout_p": 0.0, "is_causal": args["is_causal"], "attn_mask": args["attn_bias"],
             "scale": args["scale"]})

    def make(index):
        if index in (0, 1):
            return graph.call_function(operator.getitem, (flash, index))
        if index in (4, 5):
            return graph.call_function(torch.ops.aten.sym_size.int,
                                       (args["query" if index == 4 else "key"], 2))
        return graph.call_function(torch.ops.aten.full.default, ([], 0),
                                   {"dtype": torch.int64, "device": torch.device("cpu")})

    _replace_outputs(graph, node, make)
    return True


def _backward_to_cpu_op(graph, node) -> bool:
    args = _arguments(node, _BACKWARD_ARGS, {"scale": None})
    used = _outputs_used(node)
    if args["dropout_p"] != 0.0 or used is None or not used <= {0, 1, 2}:
        return False  # 3: the mask's gradient, which ATen's CPU backward does not compute
    mask = args["attn_bias"]
    value = mask.meta.get("val") if isinstance(mask, torch.fx.Node) else None
    if isinstance(value, torch.Tensor) and value.numel() == 0:
        mask = None  # an empty bias is no mask (as _backward above)
    with graph.inserting_before(node):
        flash = graph.call_function(
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
            (args["grad_out"], args["query"], args["key"], args["value"], args["out"],
             args["logsumexp"], 0.0, args["is_causal"]),
            {"attn_mask": mask, "scale": args["scale"]})
    _replace_outputs(graph, node, lambda index: graph.call_function(operator.getitem,
                                                                    (flash, index)))
    return True
