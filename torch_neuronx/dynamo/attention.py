"""Fused attention inside compiled programs: the graph rewrite.

On neuron tensors ``scaled_dot_product_attention`` takes PyTorch's "overrideable" fused backend,
whose one implementation (forward, backward and the gradient of a float mask) is
csrc/backend/ops/Attention.cpp: the neuron kernels eager runs, and the CPU kernels of the same ops
that programs (CPU code over host views) call. Graphs therefore keep the fused attention op,
which Inductor calls as an external kernel, instead of the matmuls and softmax of the math
backend: the same algorithm and rounding as eager neuron, and flash attention's speed on long
sequences and the KV cache of a decode step.

Inductor's C++ wrapper mode calls ATen ops through their C shims, past the dispatcher and so
past those CPU kernels. So in a program's CPU graph the op becomes ATen's own CPU flash attention
op wherever that computes every output the graph uses (``use_cpu_attention_ops`` below); the
registered kernels serve the rest (the mask's gradient, the forward's other outputs), with the
Python wrapper.
"""

import operator

import torch

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
