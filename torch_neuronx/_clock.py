"""The simulated Trainium clock of each neuron device, as launch records advanced it."""

import torch

from torch_neuronx import _C


def simulated_time(device=None) -> dict:
    """Where a device's simulated clock stands: ``now_ns``, the modelled time at which its latest
    launch ends, and ``busy_ns``, how long each engine (tensor, vector, scalar, gpsimd, dma) has
    been occupied in total. The model's rates come from ``torch_neuronx/data/neuron_cores.ini``
    (or the file ``NRTSIM_ENGINE_MODEL`` names)."""
    from torch_neuronx.neuron._device import _device_index

    torch.neuron._lazy_init()
    return dict(_C._simulated_time(_device_index(device)))


def core_model(device=None) -> dict:
    """The per-engine rates of a device's logical core, as its clock uses them (FLOPs or elements
    per ns, bytes per ns, fixed launch costs in ns)."""
    from torch_neuronx.neuron._device import _device_index

    torch.neuron._lazy_init()
    return dict(_C._core_model(_device_index(device)))
