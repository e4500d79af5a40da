"""The work of a compiled graph, summed from its FX nodes: what the program's one launch record
carries. Counted as the eager kernels count it (FlopModels.h): a matmul is 2*M*N*K FLOPs on the
Tensor engine, a transcendental pointwise op one element per output element on the Scalar
(activation) engine, other pointwise ops, reductions and data movement one element per element on
the Vector engine. Views cost nothing. Sizes may be symbolic (dynamic shapes): the totals are
sympy expressions, evaluated for each call's concrete sizes."""

import sympy
import torch
from torch.fx import GraphModule

aten = torch.ops.aten

# Ops the activation (Scalar) engine evaluates with its lookup tables.
_TRANSCENDENTAL = {
    aten.exp, aten.exp2, aten.expm1, aten.log, aten.log1p, aten.log2, aten.log10, aten.tanh,
    aten.sigmoid, aten.erf, aten.erfc, aten.sin, aten.cos, aten.tan, aten.sqrt, aten.rsqrt,
    aten.pow, aten.gelu, aten.gelu_backward, aten.silu, aten.silu_backward, aten.softplus,
    aten.tanh_backward, aten.sigmoid_backward, aten.reciprocal, aten.atan, aten.asin, aten.acos,
}
# Ops that only move or reinterpret data already in place.
_FREE = {
    aten.view, aten._unsafe_view, aten.reshape, aten.t, aten.transpose, aten.permute,
    aten.expand, aten.squeeze, aten.unsqueeze, aten.slice, aten.select, aten.as_strided,
    aten.alias, aten.detach, aten.split, aten.split_with_sizes, aten.unbind, aten.view_as,
    aten.sym_size, aten.sym_stride, aten.sym_numel, aten.lift_fresh, aten.empty, aten.empty_strided,
}


def _expr(value):
    """A size as a sympy expression (an int stays an int)."""
    if isinstance(value, torch.SymInt):
        return value.node.expr
    return int(value)


def _numel(val):
    n = 1
    for s in val.shape:
        n = n * _expr(s)
    return n


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _node_work(node) -> dict:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return {}
    packet = target.overloadpacket
    if packet in _FREE or target.is_view:
        return {}
    out = _val(node)
    args = node.args
    if packet in (aten.mm, aten.addmm, aten.bmm, aten.baddbmm):
        a = _val(args[-2])
        b = _val(args[-1])
        k = _expr(a.shape[-1])
        out_elems = _numel(out)
        work = {"tensor": 2 * out_elems * k}
        if packet in (aten.addmm, aten.baddbmm):
            work["vector"] = out_elems  # the bias add
        return work
    if packet is aten.convolution or packet is aten.convolution_backward:
        weight = _val(args[1])
        per_output = 1
        for s in weight.shape[1:]:
            per_output = per_output * _expr(s)
        if packet is aten.convolution:
            return {"tensor": 2 * _numel(out) * per_output}
        # Gradients of input and weight: two convolutions of the forward's size.
        grad_out = _val(args[0])
        return {"tensor": 4 * _numel(grad_out) * per_output}
    if packet in (aten._scaled_dot_product_fused_attention_overrideable,
                  aten._scaled_dot_product_fused_attention_overrideable_backward):
        # As the eager fused kernels count it (FlopModels.h attention()): the two products of
        # 4-D query and key, 4*B*H*Lq*Lk*E; the backward recomputes the scores and the
        # probabilities' gradient (2 passes) plus its own 1.5, and a mask gradient another pass.
        offset = 0 if packet is aten._scaled_dot_product_fused_attention_overrideable else 1
        q, k = _val(args[offset]), _val(args[offset + 1])
        if q is None or k is None or q.dim() != 4 or k.dim() != 4:
            return {}
        one_pass = 4 * _expr(q.shape[0]) * _expr(q.shape[1]) * _expr(q.shape[2]) * _expr(
            k.shape[2]) * _expr(q.shape[3])
        if offset == 0:
            return {"tensor": one_pass}
        mask_grad = bool(args[5][3]) and args[4] is not None
        return {"tensor": 2 * one_pass + one_pass / 2 + (one_pass if mask_grad else 0)}
    if not isinstance(out, torch.Tensor):
        if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
            out = out[0]
        else:
            return {}
    if torch.Tag.reduction in target.tags:
        source = _val(args[0])
        return {"vector": _numel(source) if isinstance(source, torch.Tensor) else _numel(out)}
    if packet in _TRANSCENDENTAL:
        return {"scalar": _numel(out)}
    return {"vector": _numel(out)}


class GraphCost:
    """Per-engine ops of one graph, as expressions over the graph inputs' sizes."""

    def __init__(self, gm: GraphModule, example_inputs):
        totals: dict = {}
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            work = _node_work(node)
            for engine, n in work.items():
                totals[engine] = totals.get(engine, 0) + n
        self._totals = {e: sympy.sympify(n) for e, n in totals.items()}
        self.bytes_engine = "tensor" if "tensor" in totals else "vector"
        # Totals no input size determines (a data-dependent size: rare) count as 0.
        self._constant = {e: int(t) if not t.free_symbols else 0 for e, t in self._totals.items()}
        # Where each symbol can be read off a call's arguments.
        self._bindings = []
        seen = set()
        for i, example in enumerate(example_inputs):
            if isinstance(example, torch.SymInt):
                sizes = [(None, example)]
            elif isinstance(example, torch.Tensor):
                sizes = list(enumerate(example.shape))
            else:
                continue
            for dim, size in sizes:
                if isinstance(size, torch.SymInt):
                    expr = size.node.expr
                    if isinstance(expr, sympy.Symbol) and expr not in seen:
                        seen.add(expr)
                        self._bindings.append((expr, i, dim))
        self._memo: dict = {}

    @property
    def is_dynamic(self) -> bool:
        """Whether the graph's input sizes are symbolic (one program serves many shapes)."""
        return bool(self._bindings)

    def sizes_seen(self) -> int:
        """Distinct input sizes this graph has been called with (1 for a static graph)."""
        return len(self._memo) if self.is_dynamic else 1

    def ops(self, args) -> dict:
        if not self._bindings:
            return self._constant
        values = tuple(
            int(args[i]) if dim is None else int(args[i].shape[dim]) for _, i, dim in self._bindings
        )
        ops = self._memo.get(values)
        if ops is None:
            subs = {sym: v for (sym, _, _), v in zip(self._bindings, values)}
            ops = {}
            for engine, total in self._totals.items():
                value = total.xreplace(subs)
                ops[engine] = int(value) if not value.free_symbols else 0
            self._memo[values] = ops
        return ops
