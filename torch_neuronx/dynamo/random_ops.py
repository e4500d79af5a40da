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
"""

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


# Decompositions the backend drops so these ops reach the program graph whole.
KEPT_WHOLE = (aten.native_dropout, aten.native_dropout.default)


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
    cpu_gm.recompile()
