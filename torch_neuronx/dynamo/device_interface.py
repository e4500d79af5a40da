"""Dynamo's view of the ``neuron`` device: how compiled code and Dynamo's device guards query and
set the current device, streams and properties (``torch._dynamo.device_interface``)."""

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from torch_neuronx import neuron as _neuron


class NeuronInterface(DeviceInterface):
    device = _neuron.device
    Event = _neuron.Event
    Stream = _neuron.Stream

    class Worker:
        # nrtsim is in-process and fork-safe to query before initialisation: the workers ask the
        # device module directly (the base class's caching exists for CUDA's fork limits).
        @staticmethod
        def set_device(device: int) -> None:
            _neuron.set_device(device)

        @staticmethod
        def current_device() -> int:
            return _neuron.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None):
            return _neuron.get_device_properties(device)

    current_device = staticmethod(_neuron.current_device)
    set_device = staticmethod(_neuron.set_device)
    device_count = staticmethod(_neuron.device_count)
    is_available = staticmethod(_neuron.is_available)
    stream = staticmethod(_neuron.stream)
    current_stream = staticmethod(_neuron.current_stream)
    set_stream = staticmethod(_neuron.set_stream)
    synchronize = staticmethod(_neuron.synchronize)

    @staticmethod
    def exchange_device(device: int) -> int:
        previous = _neuron.current_device()
        if device != previous:
            _neuron.set_device(device)
        return previous

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return NeuronInterface.exchange_device(device)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _neuron.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                        device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return _neuron.current_stream(device_idx).stream_id

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None):
        return _neuron.get_device_capability(device)

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False


def register() -> None:
    register_interface_for_device("neuron", NeuronInterface)
    for index in range(_neuron.device_count()):
        register_interface_for_device(f"neuron:{index}", NeuronInterface)
