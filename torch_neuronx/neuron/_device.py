"""Device management: availability, lazy initialisation, current device, properties."""

import threading
from dataclasses import dataclass, field
from typing import Any, Union

import torch

from torch_neuronx import _C

_DeviceLike = Union[torch.device, str, int, None]

_init_lock = threading.Lock()
_initialized = False


def is_available() -> bool:
    """Whether a neuron device can be used. Never raises and never initialises the runtime."""
    try:
        return _C._device_count() > 0
    except Exception:
        return False


def device_count() -> int:
    """Logical NeuronCores visible to this process (NEURON_RT_VISIBLE_CORES / NUM_CORES,
    NEURON_LOGICAL_NC_CONFIG). Does not initialise the runtime."""
    return _C._device_count()


def is_initialized() -> bool:
    # The runtime may also have been started from C++ without passing through _lazy_init (e.g.
    # torch.Stream(device="neuron") goes straight to the guard): it is initialised all the same.
    return (_initialized or _C._is_initialized()) and not _is_in_bad_fork()


def _is_in_bad_fork() -> bool:
    return _C._in_bad_fork()


def _lazy_init() -> None:
    global _initialized
    if _initialized and not _is_in_bad_fork():
        return
    with _init_lock:
        if _initialized and not _is_in_bad_fork():
            return
        if _is_in_bad_fork():
            raise RuntimeError(
                "Cannot re-initialize neuron in forked subprocess. To use neuron with "
                "multiprocessing, you must use the 'spawn' start method"
            )
        if device_count() == 0:
            why = _C._configuration_error()
            raise RuntimeError("no neuron device is available" + (f": {why}" if why else ""))
        _C._init()
        _initialized = True


def init() -> None:
    """Initialise the neuron runtime now (it otherwise initialises on first use)."""
    _lazy_init()


def _device_index(device: _DeviceLike, optional: bool = True) -> int:
    """The index of `device` ('neuron', 'neuron:1', torch.device, int); the current device for
    None or an index-less 'neuron'."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        return current_device() if device.index is None else device.index
    raise TypeError(f"expected a neuron device, index or None, got {type(device).__name__}")


def current_device() -> int:
    return _C._current_device()


def _out_of_range_message(index: int, count: int, alias: int = -1) -> str:
    # TorchNeuron's sentence first (code written against it may match on it), then which devices
    # exist and what sets them. The same words as the C++ checks (check_device_index in
    # NeuronRuntime.cpp, Topology::core in nrtsim), which answer the paths that reach C++
    # directly: tensor placement, the guard, torch.accelerator.set_device_index.
    devices = "neuron:0" if count == 1 else f"neuron:0-neuron:{count - 1}"
    also = (
        f"; its one core is also neuron:{alias}, its number on the instance "
        f"(NEURON_RT_VISIBLE_CORES={alias})"
        if alias >= 0 and alias != index
        else ""
    )
    if index < 0:
        # As TorchNeuron and torch.cuda refuse it: no negative index stands for the current device
        # in these calls.
        return (
            f"Device index {index} is out of range. Valid range is 0 to {count - 1} for this "
            f"process ({devices}): a negative index names no device; pass None (or nothing) for "
            f"the current device, torch.neuron.current_device() = {current_device()}"
        )
    return (
        f"Device index {index} is out of range. Valid range is 0 to {count - 1} for this process: "
        f"neuron:{index} does not exist among its {count} NeuronCore device(s) ({devices}), set by "
        f"NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES{also}"
    )


def _resolve_alias(index: int) -> int:
    """0 for the number on the instance of the process's one core (its second name, torchrun's
    layout: see _check_device_index), any other index unchanged and unchecked. The rule of
    resolve_device_index_unchecked (csrc/backend/core/NeuronRuntime.cpp), for the Python callers
    whose index may not fit C++'s 8-bit device index. The alias exists only when exactly one core
    is visible, so it is never an index the process already has."""
    if index > 0 and index == _C._single_core_alias():
        return 0
    return index


def _check_device_index(index: int, error: type = ValueError) -> int:
    """The device `index` names: `index` if this process sees neuron:<index>, 0 if it is the
    number on the instance of the process's one core (torchrun's layout: each rank sees only
    NEURON_RT_VISIBLE_CORES=$LOCAL_RANK, and code written for every core visible names it
    neuron:<LOCAL_RANK>); otherwise `error`: ValueError, as TorchNeuron raises from device
    selection, or RuntimeError where torch.neuron has always raised it (and CUDA does):
    synchronize, streams, the memory functions.

    Checked here, before the index reaches C++, where PyTorch's device index is a signed byte and
    an index such as 200 would wrap to -56."""
    count = device_count()
    if count == 0:
        why = _C._configuration_error()
        raise RuntimeError("no neuron device is available" + (f": {why}" if why else ""))
    if 0 <= index < count:
        return index
    alias = _C._single_core_alias()  # -1 when the process has no such alias
    if alias >= 0 and index == alias:
        return 0
    raise error(_out_of_range_message(index, count, alias))


def set_device(device: _DeviceLike) -> None:
    """Make `device` the calling thread's current neuron device. A negative index is a no-op (as
    in torch.cuda); an index this process does not see raises ValueError."""
    index = _device_index(device)
    if index < 0:
        return
    index = _check_device_index(index)
    _lazy_init()
    _C._set_device(index)


class device:
    """Context manager that makes `device` the current neuron device inside the block."""

    def __init__(self, device: _DeviceLike):
        self.idx = -1 if device is None else _device_index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx < 0:
            return self
        self.idx = _check_device_index(self.idx)  # ValueError before anything switches
        self.prev_idx = current_device()
        if self.idx != self.prev_idx:
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0 and self.prev_idx != self.idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor `obj` current (no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "neuron" else None)


def synchronize(device: _DeviceLike = None) -> None:
    """Wait until all work queued on every stream of `device` (default: the current one) is done."""
    _lazy_init()
    index = _device_index(device)
    if index >= 0:  # a negative index waits for every device
        index = _check_device_index(index, RuntimeError)
    _C._synchronize(index)


@dataclass(frozen=True)
class NeuronDeviceProperties:
    """What torch.neuron.get_device_properties() returns: TorchNeuron's fields (name = instance
    type, total_memory = the logical core's HBM) plus the simulated topology behind it."""

    name: str
    total_memory: int
    chip: str
    logical_core_id: int
    chip_index: int
    physical_cores: tuple = field(default_factory=tuple)
    logical_nc_config: int = 1

    def __repr__(self) -> str:
        return (
            f"_NeuronDeviceProperties(name='{self.name}', chip='{self.chip}', "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"logical_core_id={self.logical_core_id}, physical_cores={list(self.physical_cores)}, "
            f"logical_nc_config={self.logical_nc_config})"
        )


def get_device_properties(device: _DeviceLike = None) -> NeuronDeviceProperties:
    index = _check_device_index(_device_index(device))
    _lazy_init()
    p: dict[str, Any] = _C._device_properties(index)
    p["physical_cores"] = tuple(p["physical_cores"])
    return NeuronDeviceProperties(**p)


def get_device_name(device: _DeviceLike = None) -> str:
    """The device's name as TorchNeuron gives it: "neuron:<index>" for an index or None (the
    current device), str(device) for a torch.device or device string ("neuron:1", or "neuron"
    for an index-less one). The instance type is get_device_properties(device).name."""
    if isinstance(device, (torch.device, str)):
        device = torch.device(device)
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        if device.index is not None:
            _check_device_index(device.index)
        return str(device)
    return f"neuron:{_check_device_index(_device_index(device))}"


def get_device_capability(device: _DeviceLike = None) -> tuple:
    """(major, minor) of the NeuronCore generation: Trainium1 -> (2, 0), Trainium2 -> (3, 0),
    Trainium3 -> (4, 0), following NeuronCore-v2/v3/v4."""
    chip = get_device_properties(device).chip
    return {"Trainium1": (2, 0), "Trainium2": (3, 0), "Trainium3": (4, 0)}.get(chip, (0, 0))


def topology() -> dict:
    """The simulated instance as this process sees it (instance type, chips, LNC, visible cores)."""
    _lazy_init()
    return dict(_C._topology())


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list:
    return [torch.float32, torch.float16, torch.bfloat16]
