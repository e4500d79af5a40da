"""Random ops inside compiled programs draw from the neuron generator.

A program is CPU code, whose random ops would draw from the CPU default generator: reproducible
under ``torch.manual_seed``, but not eager neuron's numbers, and out of reach of
``torch.neuron.manual_seed`` / ``set_rng_state``. So the program's CPU graph calls the ops of
csrc/backend/ops/Random.cpp instead, the one random path of eager and compiled code: they reserve
values from the program device's generator at run time and run the fills of the eager kernels, so
a compiled draw gives the same numbers as eager neuron at the same point of the neuron stream, and
advances the stream as eager does. This module only rewrites the graph:

- ``native_dropout`` is kept whole through AOTAutograd (its decomposition into ``rand_like`` is
  dropped from the table) and becomes ``neuron_program::dropout``;
- the other random ops written in compiled code (``torch.rand``/``randn``/``randint`` and their
  ``_like`` forms, ``bernoulli``, and the in-place fills ``uniform_``, ``normal_``, ``random_``,
  ``exponential_``, ... whose functional forms reach the graph) are eager neuron kernels that
  fill a fresh tensor; each becomes ``neuron_program::fill_random`` over a template tensor of the
  result's size, dtype and layout (the ``empty``/``empty_like`` eager runs first).

``torch.bernoulli(p)`` reaches the graph as Inductor's decomposition ``rand_like(p) < p``, which
draws the same uniform values as ATen's CPU ``bernoulli_(p)`` and compares them the same way (one
value per element, in order), so it too matches eager for float32 probabilities. Random ops that
eager neuron runs through the CPU fallback (``randperm``, ``multinomial``, ``normal(mean_tensor,
...)``) draw from the CPU generator there, and stay ATen CPU ops in programs, drawing from it too.
"""

import torch

import torch_neuronx._C  # noqa: F401  (defines the neuron_program ops)

aten = torch.ops.aten


# Decompositions the backend drops so these ops reach the program graph whole.
KEPT_WHOLE = (aten.native_dropout, aten.native_dropout.default)


def _arg(node, index, name, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _factory_template(graph, node, size):
    """`empty(size)` with the factory's dtype (its value's), as eager allocates before the fill."""
    dtype = node.meta["val"].dtype
    return graph.call_function(aten.empty.memory_format, (size,),
                               {"dtype": dtype, "device": torch.device("cpu")})


def _like_template(graph, node):
    """`empty_like(self, dtype=..., memory_format=...)` as the ``*_like`` factory allocates."""
    kwargs = {"dtype": node.meta["val"].dtype}
    if node.kwargs.get("memory_format") is not None:
        kwargs["memory_format"] = node.kwargs["memory_format"]
    return graph.call_function(aten.empty_like.default, (node.args[0],), kwargs)


def _random_fill(graph, node):
    """(template, kind, a, b, low, high, p) for a random node eager neuron computes as one fill
    from its generator; None for any other node."""
    t = node.target
    if node.kwargs.get("generator") is not None:
        return None  # an explicit generator: not the device default stream
    if t is aten.rand.default:
        return _factory_template(graph, node, node.args[0]), "uniform", 0.0, 1.0, 0, None, None
    if t is aten.randn.default:
        return _factory_template(graph, node, node.args[0]), "normal", 0.0, 1.0, 0, None, None
    if t is aten.randint.default:  # randint(high, size)
        return (_factory_template(graph, node, node.args[1]), "random_from", 0.0, 0.0, 0,
                node.args[0], None)
    if t is aten.randint.low:  # randint(low, high, size)
        return (_factory_template(graph, node, node.args[2]), "random_from", 0.0, 0.0,
                node.args[0], node.args[1], None)
    if t is aten.rand_like.default:
        return _like_template(graph, node), "uniform", 0.0, 1.0, 0, None, None
    if t is aten.randn_like.default:
        return _like_template(graph, node), "normal", 0.0, 1.0, 0, None, None
    if t is aten.randint_like.default:  # randint_like(self, high)
        return _like_template(graph, node), "random_from", 0.0, 0.0, 0, node.args[1], None
    if t is aten.randint_like.low_dtype:  # randint_like(self, low, high)
        return (_like_template(graph, node), "random_from", 0.0, 0.0, node.args[1], node.args[2],
                None)
    # Functional forms of the in-place fills: the result is like `self`.
    self = node.args[0] if node.args else None
    if t is aten.uniform.default:
        return self, "uniform", float(_arg(node, 1, "from", 0.0)), float(_arg(node, 2, "to", 1.0)),             0, None, None
    if t is aten.normal_functional.default:
        return self, "normal", float(_arg(node, 1, "mean", 0.0)), float(_arg(node, 2, "std", 1.0)),             0, None, None
    if t is aten.random.default:
        return self, "random", 0.0, 0.0, 0, None, None
    if t is aten.random.to:
        return self, "random_to", 0.0, 0.0, 0, _arg(node, 1, "to"), None
    if t is getattr(aten.random, "from"):
        return self, "random_from", 0.0, 0.0, _arg(node, 1, "from"), _arg(node, 2, "to"), None
    if t is aten.bernoulli.p:
        return self, "bernoulli_float", float(_arg(node, 1, "p", 0.5)), 0.0, 0, None, None
    if t is aten.bernoulli.Tensor:
        return self, "bernoulli_tensor", 0.0, 0.0, 0, None, _arg(node, 1, "p")
    if t is aten.exponential.default:
        return self, "exponential", float(_arg(node, 1, "lambd", 1.0)), 0.0, 0, None, None
    if t is aten.log_normal.default:
        return self, "log_normal", float(_arg(node, 1, "mean", 1.0)),             float(_arg(node, 2, "std", 2.0)), 0, None, None
    if t is aten.cauchy.default:
        return self, "cauchy", float(_arg(node, 1, "median", 0.0)),             float(_arg(node, 2, "sigma", 1.0)), 0, None, None
    if t is aten.geometric.default:
        return self, "geometric", float(_arg(node, 1, "p")), 0.0, 0, None, None
    return None


def draw_from_device(cpu_gm: torch.fx.GraphModule, device: int) -> None:
    """Point the random ops of a program's CPU graph at neuron:`device`'s generator."""
    for node in cpu_gm.graph.nodes:
        if node.op == "call_function" and node.target is aten.native_dropout.default:
            input, p, *rest = node.args
            train = rest[0] if rest else node.kwargs.get("train")
            if train is False:
                continue  # eval: no draw (a copy), as the eager kernel
            node.target = torch.ops.neuron_program.dropout.default
            node.args = (input, p, device)
            node.kwargs = {}
            continue
        if node.op != "call_function":
            continue
        with cpu_gm.graph.inserting_before(node):
            fill = _random_fill(cpu_gm.graph, node)
        if fill is None:
            continue
        template, kind, a, b, low, high, p = fill
        node.target = torch.ops.neuron_program.fill_random.default
        node.args = (template, kind, a, b, low, high, p, device)
        node.kwargs = {}
    cpu_gm.graph.eliminate_dead_code()
    cpu_gm.recompile()
