"""``torch.neuron._utils``: what torch reads from a device module's ``_utils``, as from
``torch.cuda._utils``. torch.load resolves every neuron storage location (its own, or the one
``map_location`` gives) through ``_get_device_index`` before checking it against
``device_count()``, so the alias of a process's one core (``neuron:<LOCAL_RANK>`` under torchrun,
see _device._check_device_index) loads onto ``neuron:0``, which it names."""

from __future__ import annotations

import torch


def _get_device_index(device, optional: bool = False, allow_cpu: bool = False) -> int:
    """The neuron device index `device` names (a torch.device, 'neuron[:i]' or an int): -1 for a
    CPU device when `allow_cpu`; the current device for an index-less device when `optional`;
    0 for the alias of the process's one core. An index out of range otherwise is returned as
    given, for the caller's own range check and message."""
    from torch_neuronx.neuron._device import _resolve_alias, current_device

    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type == "cpu" and allow_cpu:
            return -1
        if device.type != "neuron":
            raise ValueError(f"Expected a neuron device, but got: {device}")
        if device.index is None:
            if not optional:
                raise ValueError(f"Expected a neuron device with a specified index or an integer, "
                                 f"but got: {device}")
            return current_device()
        index = device.index
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    elif device is None and optional:
        return current_device()
    else:
        raise ValueError(f"Expected a neuron device or an integer, but got: {device!r}")
    return _resolve_alias(index)
