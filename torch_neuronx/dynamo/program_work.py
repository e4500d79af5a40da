"""The work of a compiled program: what its one launch record carries, asked of the op-work table
(csrc/backend/core/OpWork.h, through ``_C._op_work``) once per op of its graph at compile time.
No FLOP or byte model lives here: this module only says which ops a graph runs, with which
shapes.

An op of a graph is an FX node, or, for an op Inductor's decompositions split into parts (silu
into neg/exp/add/div, log_softmax, nll_loss, slice_backward, ...), the op the parts stand for:
:func:`marking` wraps those decompositions so that the nodes one call produced carry the call,
and nodes Inductor's joint-graph passes make among those parts carry it too (_adopt_rewritten).
Each op counts the launches eager makes for it (torch_neuronx/_op_work.py): one, asked of the
table, when neuron has a kernel of its own for it (silu is one Scalar-engine activation, not four
instructions); its composite kernel's parts otherwise (embedding is an index_select), found by
running the composite on meta tensors of the call's sizes. When the partitioner recomputes only
some parts of a call in the backward, those parts count as what they are.

Inside a program, elementwise work, casts and copies fuse into their neighbours: each op's work
is taken as the runtime's fusion rule says (runtime/ProgramFusion.h: an intermediate crosses HBM
once), the rule the estimate's projection of compiled phases uses too.

Sizes may be symbolic (dynamic shapes): each op's tensors are kept as shapes and strides of sympy
expressions over the graph inputs' sizes, and a call's work is evaluated for its concrete sizes
(once per distinct sizes).
"""

from __future__ import annotations

import copy
import functools

import sympy
import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from torch_neuronx import _C, _op_work

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
# Number formats by width: a program's record carries the widest its Tensor-engine ops stream.
_WIDTH = {"fp8": 0, "bf16": 1, "fp32": 2}


def _expr(value):
    """A size as a sympy expression (an int stays an int)."""
    if isinstance(value, torch.SymInt):
        return value.node.expr
    return int(value)


class _TensorSpec:
    """Shape, strides and dtype of one tensor of an op: what the table needs of it."""

    __slots__ = ("shape", "stride", "dtype")

    def __init__(self, t: torch.Tensor):
        self.shape = tuple(_expr(s) for s in t.shape)
        self.stride = tuple(_expr(s) for s in t.stride())
        self.dtype = t.dtype

    def materialize(self, subs: dict) -> torch.Tensor:
        def concrete(e):
            return int(e.xreplace(subs)) if isinstance(e, sympy.Expr) else e

        return torch.empty_strided([concrete(s) for s in self.shape],
                                   [concrete(s) for s in self.stride], dtype=self.dtype,
                                   device="meta")


class _SizeSpec:
    """A symbolic scalar argument (a SymInt)."""

    __slots__ = ("expr",)

    def __init__(self, expr):
        self.expr = expr

    def materialize(self, subs: dict):
        return int(self.expr.xreplace(subs)) if isinstance(self.expr, sympy.Expr) else self.expr


class _HostScalar:
    """A number where the schema wants a Tensor (x * 0.5 in a graph): a 0-d host tensor, as
    eager's wrapped number (an instruction operand: the table reads no bytes for it)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def materialize(self, subs: dict):
        return torch.tensor(self.value)


def _wrapped_numbers(func, args, kwargs):
    by_name = {a.name: a for a in func._schema.arguments}

    def wrap(argument, value):
        if isinstance(value, (bool, int, float)) and str(argument.type) == "Tensor":
            return _HostScalar(value)
        return value

    args = tuple(wrap(a, v) for a, v in zip(func._schema.arguments, args)) + tuple(
        args[len(func._schema.arguments):])
    kwargs = {k: wrap(by_name[k], v) if k in by_name else v for k, v in kwargs.items()}
    return args, kwargs


def _spec(value):
    if isinstance(value, torch.Tensor):
        return _TensorSpec(value)
    if isinstance(value, torch.SymInt):
        return _SizeSpec(_expr(value))
    if isinstance(value, (torch.SymFloat, torch.SymBool)):
        raise TypeError("symbolic float/bool argument")
    if isinstance(value, torch.device) and value.type == "neuron":
        return torch.device("meta")
    return value


def _materialize(value, subs):
    if isinstance(value, (_TensorSpec, _SizeSpec, _HostScalar)):
        return value.materialize(subs)
    return value


class OpCall:
    """One op of a program with its arguments' and results' specs."""

    __slots__ = ("op", "overload", "args", "kwargs", "outputs", "output_names", "on_host")

    def __init__(self, func, args, kwargs, outputs, output_names=()):
        self.op = func._schema.name          # "aten::silu"
        self.overload = func._overloadname   # "default"
        # An op whose tensors are all host tensors (a graph's lifted constant, torch.tensor(2.0)
        # in the traced code) runs in the program's CPU code as eager runs it on the host: no
        # launch. (Its specs below are meta tensors, which would count it as device work.)
        tensors = [t for t in tree_flatten((args, kwargs, outputs))[0] if isinstance(t, torch.Tensor)]
        self.on_host = bool(tensors) and all(t.device.type == "cpu" for t in tensors)
        args, kwargs = _wrapped_numbers(func, args, kwargs)
        self.args = tree_map(_spec, tuple(args))
        self.kwargs = tree_map(_spec, dict(kwargs))
        self.outputs = [_TensorSpec(t) for t in tree_flatten(outputs)[0]
                        if isinstance(t, torch.Tensor)]
        self.output_names = frozenset(output_names)

    def func(self):
        namespace, name = self.op.split("::")
        return getattr(getattr(getattr(torch.ops, namespace), name), self.overload)

    def works(self, subs: dict) -> list:
        """The work of each launch eager makes for this call, as ops of a program."""
        if self.on_host:
            return []
        def go(value):
            return tree_map(lambda v: _materialize(v, subs), value,
                            is_leaf=lambda v: isinstance(v, (_TensorSpec, _SizeSpec, _HostScalar)))

        func, args, kwargs = self.func(), go(self.args), go(self.kwargs)
        launches = _Launches()
        try:
            with launches:
                func(*args, **kwargs)
        except Exception:
            # No meta kernel to run the composite with (a custom op): the call as one launch.
            launches.calls = [(func, args, kwargs, [t.materialize(subs) for t in self.outputs])]
        works = []
        for f, a, k, o in launches.calls:
            if any(not isinstance(s, int) for t in o for s in t.shape):
                # A part whose size depends on data (nonzero's): the launch cannot know it.
                raise ValueError(f"{f}: a result's size depends on data")
            a, k = _wrapped_numbers(f, a, k)
            a, k = tree_map(lambda v: _materialize(v, subs), (a, k),
                            is_leaf=lambda v: isinstance(v, _HostScalar))
            works.append(_C._op_work(f, a, k, o, inside_program=True))
        return works


class _Launches(TorchDispatchMode):
    """Records the launches eager makes for the ops run under it (torch_neuronx/_op_work.py):
    an op neuron runs whole is recorded, a composite runs as its parts, a view moves nothing."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _op_work.returns_alias(func):
            return func(*args, **kwargs)
        parts = _op_work.composite_parts(func)
        if parts is not None:
            with self:
                return parts(*args, **kwargs)
        out = func(*args, **kwargs)
        self.calls.append((func, args, kwargs,
                           [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]))
        return out


# ---------------------------------------------------------------------------------------------
# Decompositions that keep the op they decompose


def marking(op, decomposition):
    """`decomposition` of `op`, marking every node its call adds to the graph being traced with
    the call (node.meta["neuron_op"]), so that the program's work asks the table for `op` whole."""
    from torch.fx.experimental import proxy_tensor

    @functools.wraps(decomposition)
    def run(*args, **kwargs):
        mode = proxy_tensor.get_innermost_proxy_mode()
        if mode is None:
            return decomposition(*args, **kwargs)
        graph = mode.tracer.graph
        last = graph._root.prev
        out = decomposition(*args, **kwargs)
        if out is NotImplemented:
            return out
        try:
            names = []
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    slot = proxy_tensor.get_proxy_slot(t, mode.tracer, None)
                    if slot is not None:
                        names.append(slot.proxy.node.name)
            call = OpCall(op, args, kwargs, out, names)
        except TypeError:
            return out  # an argument the table cannot take: the parts count as themselves
        node = last.next
        while node is not graph._root:
            node.meta["neuron_op"] = call
            node = node.next
        return out

    return run


# Nodes of a joint graph as AOTAutograd traced it, before Inductor's joint-graph passes rewrite
# it (backend._partition tags them; the partitioner copies the tag with each node it places).
_TRACED = "neuron_traced"


def note_traced(gm) -> None:
    """Tag the nodes of `gm`, a joint graph about to go through Inductor's joint-graph passes."""
    for node in gm.graph.nodes:
        node.meta[_TRACED] = True


def _adopt_rewritten(gm) -> None:
    """A node Inductor's joint-graph passes made inside a decomposed call (nll_loss_backward's
    scatter into zeros becomes where(iota == target, -1, 0)) stands for the part it replaced:
    when every user of such a node belongs to one call, the node does too, so the call still
    counts once, as eager's launch. A node the passes made that feeds more than one call counts
    as itself. Graphs that did not go through the passes (no node tagged) are left as they are."""
    nodes = list(gm.graph.nodes)
    if not any(_TRACED in n.meta for n in nodes):
        return
    for node in reversed(nodes):
        if node.op != "call_function" or _TRACED in node.meta or "neuron_op" in node.meta:
            continue
        marks = {id(u.meta.get("neuron_op")): u.meta.get("neuron_op") for u in node.users}
        if len(marks) == 1 and None not in marks.values():
            node.meta["neuron_op"] = next(iter(marks.values()))


# ---------------------------------------------------------------------------------------------
# A program's work


# A functional op whose result the graph copies back into the input it updated (a KV cache's
# indexed write, a counter's add, functionalized): the program runs it in place (Inductor
# reinplaces it, as eager runs the in-place op), so it counts as its in-place form and the copy
# back as nothing.


def _inplace_form(op: str, overload: str):
    """("aten::index_put_", "default") for ("aten::index_put", "default"), or None."""
    namespace, name = op.split("::")
    packet = getattr(getattr(torch.ops, namespace), name + "_", None)
    if packet is None or overload not in packet.overloads():
        return None
    return f"{namespace}::{name}_", overload


def _updates_in_place(gm) -> tuple:
    """(names of the functional ops whose result the graph copies back into their own first
    input, names of those copy_ nodes)."""
    writes, copies = set(), set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten.copy_.default:
            continue
        target, value = node.args[0], node.args[1]
        if (isinstance(target, torch.fx.Node) and target.op == "placeholder"
                and isinstance(value, torch.fx.Node) and value.op == "call_function"
                and isinstance(value.target, torch._ops.OpOverload) and value.args
                and value.args[0] is target
                and _inplace_form(value.target._schema.name, value.target._overloadname)):
            writes.add(value.name)
            copies.add(node.name)
    return writes, copies


def _in_place(call: "OpCall") -> "OpCall":
    """`call` (a functional op) as its in-place form, when it has one."""
    form = _inplace_form(call.op, call.overload)
    if form is None:
        return call
    inplace = copy.copy(call)
    inplace.op, inplace.overload = form
    return inplace


def _node_calls(gm) -> list:
    """The ops of a graph, in order: marked calls whole (once, where their results are
    computed), every other call_function node as itself."""
    _adopt_rewritten(gm)
    present = {n.name for n in gm.graph.nodes}
    in_place, copied_back = _updates_in_place(gm)
    calls, seen = [], set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.name in copied_back:
            continue
        marked = node.meta.get("neuron_op")
        if marked is not None and marked.output_names and marked.output_names <= present:
            if id(marked) not in seen:
                seen.add(id(marked))
                calls.append(_in_place(marked) if marked.output_names <= in_place else marked)
            continue
        val = node.meta.get("val")

        def val_of(a):
            return a.meta.get("val") if isinstance(a, torch.fx.Node) else a

        try:
            call = OpCall(node.target, torch.fx.node.map_aggregate(node.args, val_of),
                          torch.fx.node.map_aggregate(node.kwargs, val_of),
                          val if val is not None else ())
        except TypeError:
            continue
        calls.append(_in_place(call) if node.name in in_place else call)
    return calls


def _add(total: dict, work: dict) -> None:
    for engine, (ops, read, written) in work["engines"].items():
        t = total["engines"][engine]
        total["engines"][engine] = (t[0] + ops, t[1] + read, t[2] + written)
    tensor = work["engines"]["tensor"][0] > 0
    key = "tensor_precision" if tensor else "other_precision"
    if total[key] is None or _WIDTH[work["precision"]] > _WIDTH[total[key]]:
        total[key] = work["precision"]


class ProgramWork:
    """The work of one program, per engine (ops, bytes read, bytes written) and number format,
    as expressions over the graph inputs' sizes."""

    def __init__(self, gm, example_inputs):
        self._calls = _node_calls(gm)
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
        # A static program's work, once.
        self._static = None if self._bindings else self._evaluate({})

    def _evaluate(self, subs: dict) -> dict:
        total = {"engines": {e: (0, 0, 0) for e in ENGINES}, "tensor_precision": None,
                 "other_precision": None}
        # Outside every mode the caller has on (the compile's FakeTensorMode when a program is
        # built; none when a cached one is loaded): each op runs on plain meta tensors either
        # way, so a program loaded from the cache carries the work it carried when compiled.
        with _disable_current_modes():
            for call in self._calls:
                try:
                    for work in call.works(subs):
                        _add(total, work)
                except (TypeError, ValueError):
                    # A size no input determines (data-dependent, rare): the op counts as
                    # nothing, as the launch cannot know it.
                    continue
        precision = total["tensor_precision"] or total["other_precision"] or "fp32"
        return {"engines": total["engines"], "precision": precision}

    # In the program cache a program keeps its ops, not their work: the work is asked of the
    # table again when it is loaded, so a cached program never carries another build's figures.
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_static"] = None
        state["_memo"] = {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if not self._bindings:
            self._static = self._evaluate({})

    @property
    def is_dynamic(self) -> bool:
        """Whether the graph's input sizes are symbolic (one program serves many shapes)."""
        return bool(self._bindings)

    def sizes_seen(self) -> int:
        """Distinct input sizes this graph has been called with (1 for a static graph)."""
        return len(self._memo) if self.is_dynamic else 1

    def work(self, args) -> dict:
        """{"engines": {engine: (ops, bytes_read, bytes_written)}, "precision"} of a call."""
        if self._static is not None:
            return self._static
        values = tuple(
            int(args[i]) if dim is None else int(args[i].shape[dim]) for _, i, dim in self._bindings
        )
        work = self._memo.get(values)
        if work is None:
            work = self._evaluate({sym: v for (sym, _, _), v in zip(self._bindings, values)})
            self._memo[values] = work
        return work
