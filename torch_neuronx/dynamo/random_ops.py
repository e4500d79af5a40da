"""Random ops inside compiled programs draw from the neuron generator.

Eager dropout on neuron (csrc/backend/ops/Random.cpp, native_dropout) reserves one value per
element from the device's generator (its (seed, offset) stream) and computes the mask with
ATen's CPU bernoulli from a CPU generator seeded by that reservation. A program is CPU code, whose
random ops would draw from the CPU default generator instead: reproducible under
``torch.manual_seed``, but not eager neuron's numbers, and out of reach of
``torch.neuron.manual_seed`` / ``set_rng_state``.

So the backend keeps ``native_dropout`` whole through AOTAutograd (its decomposition into
``rand_like`` is dropped from the table) and, in the program's CPU graph, replaces it with
``neuron_program::dropout``: the eager kernel's computation, with the reservation made at run
time from the program's device generator (``_C._program_host_generator``). A compiled dropout
therefore gives the same mask and values as eager dropout at the same point of the neuron
stream, and advances the stream as eager does.

The other random ops written in compiled code (``torch.rand``/``randn``/``randint`` and their
``_like`` forms, ``bernoulli``, and the in-place fills ``uniform_``, ``normal_``, ``random_``,
``exponential_``, ... whose functional forms reach the graph) are eager neuron kernels that fill a
fresh tensor with ATen's CPU distribution from the device generator (csrc/backend/ops/Random.cpp).
In the program's CPU graph each becomes ``neuron_program::fill_random`` over a template tensor of
the result's size, dtype and layout (the ``empty``/``empty_like`` eager runs first): the same
reservation (one value per element) and the same CPU distribution, so the same numbers as eager
neuron under the same seed. ``torch.bernoulli(p)`` reaches the graph as Inductor's decomposition
``rand_like(p) < p``, which draws the same uniform values as ATen's CPU ``bernoulli_(p)`` and
compares them the same way (one value per element, in order), so it too matches eager for float32
probabilities. Random ops that eager neuron
runs through the CPU fallback (``randperm``, ``multinomial``, ``normal(mean_tensor, ...)``) draw
from the CPU generator there, and stay ATen CPU ops in programs, drawing from it too.
"""

from typing import Optional

import torch

from torch_neuronx import _C

aten = torch.ops.aten


@torch.library.custom_op("neuron_program::dropout", mutates_args=(),
                         tags=(torch.Tag.nondeterministic_seeded,))
def dropout(input: torch.Tensor, p: float, device: int) -> tuple[torch.Tensor, torch.Tensor]:
    """native_dropout on the host view of a neuron tensor, drawing from neuron:`device`."""
    keep = 1.0 - p
    scale = 0.0 if keep == 0.0 else 1.0 / keep
    mask = torch.empty_like(input, dtype=torch.bool, memory_format=torch.contiguous_format)
    output = torch.empty_like(input, memory_format=torch.contiguous_format)
    if input.numel() == 0:
        return output, mask
    mask.bernoulli_(keep, generator=_C._program_host_generator(device, input.numel()))
    torch.mul(input, mask, out=output).mul_(scale)
    return output, mask


@dropout.register_fake
def _(input, p, device):
    return (torch.empty_like(input, memory_format=torch.contiguous_format),
            torch.empty_like(input, dtype=torch.bool, memory_format=torch.contiguous_format))


# The eager kernel's fill per distribution (csrc/backend/ops/Random.cpp), on a host tensor with a
# generator: `a`, `b` the float parameters, `low`, `high` the integer ones.
_FILLS = {
    "uniform": lambda t, a, b, low, high, p, g: t.uniform_(a, b, generator=g),
    "normal": lambda t, a, b, low, high, p, g: t.normal_(a, b, generator=g),
    "random": lambda t, a, b, low, high, p, g: t.random_(generator=g),
    "random_to": lambda t, a, b, low, high, p, g: t.random_(high, generator=g),
    "random_from": lambda t, a, b, low, high, p, g: t.random_(low, high, generator=g),
    "bernoulli_float": lambda t, a, b, low, high, p, g: t.bernoulli_(a, generator=g),
    "bernoulli_tensor": lambda t, a, b, low, high, p, g: t.bernoulli_(p, generator=g),
    "exponential": lambda t, a, b, low, high, p, g: t.exponential_(a, generator=g),
    "log_normal": lambda t, a, b, low, high, p, g: t.log_normal_(a, b, generator=g),
    "cauchy": lambda t, a, b, low, high, p, g: t.cauchy_(a, b, generator=g),
    "geometric": lambda t, a, b, low, high, p, g: t.geometric_(a, generator=g),
}


@torch.library.custom_op("neuron_program::fill_random", mutates_args=(),
                         tags=(torch.Tag.nondeterministic_seeded,))
def fill_random(template: torch.Tensor, kind: str, a: float, b: float, low: int,
                high: Optional[int], p: Optional[torch.Tensor], device: int) -> torch.Tensor:
    """A fresh tensor like `template` (size, dtype, layout) filled as the eager neuron kernel
    `kind` fills it, drawing numel values from neuron:`device`'s generator."""
    out = torch.empty_like(template)
    if out.numel() == 0:
        return out
    _FILLS[kind](out, a, b, low, high, p, _C._program_host_generator(device, out.numel()))
    return out


@fill_random.register_fake
def _(template, kind, a, b, low, high, p, device):
    return torch.empty_like(template)


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
