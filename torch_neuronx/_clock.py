"""The simulated Trainium clock of each neuron device, as launch records advanced it."""

import torch

from torch_neuronx import _C


def _checked_index(device) -> int:
    # Through torch.neuron's check, so that neuron:<LOCAL_RANK> names a torchrun rank's one core
    # here too, and a bad index gets the same message as everywhere else.
    from torch_neuronx.neuron._device import _check_device_index, _device_index

    return _check_device_index(_device_index(device), RuntimeError)


def simulated_time(device=None) -> dict:
    """Where a device's simulated clock stands: ``now_ns``, the modelled time at which its latest
    launch ends, and ``busy_ns``, how long each engine (tensor, vector, scalar, gpsimd, dma) has
    been occupied in total. The model's rates come from ``torch_neuronx/data/neuron_cores.ini``
    (or the file ``NRTSIM_ENGINE_MODEL`` names)."""
    torch.neuron._lazy_init()
    return dict(_C._simulated_time(_checked_index(device)))


def core_links(device=None) -> dict:
    """The links a device's clock prices collectives with, per logical core: the chip's
    NeuronLink (``scale_up``, ``link_bytes_per_ns`` each way, ``hop_latency_ns`` per algorithm
    step, the mesh / recursive doubling-halving size limits) and EFA (``scale_out``,
    ``efa_bytes_per_ns``, ``efa_hop_latency_ns``), and ``cores_per_chip`` (the logical cores that
    share them). The rates are what a collective's transfers sustain: the core's share of the
    link's bandwidth times the link's ``efficiency``. From ``torch_neuronx/data/neuron_links.ini``
    (or the file ``NRTSIM_LINK_MODEL`` names); the estimate prices collectives with the same
    links and rule."""
    torch.neuron._lazy_init()
    return dict(_C._core_links(_checked_index(device)))


def core_model(device=None) -> dict:
    """The per-engine rates of a device's logical core, as its clock uses them (FLOPs or elements
    per ns, bytes per ns, fixed launch costs in ns)."""
    torch.neuron._lazy_init()
    return dict(_C._core_model(_checked_index(device)))
