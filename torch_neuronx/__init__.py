"""torch-neuronx, open implementation: the ``neuron`` device for PyTorch on the nrtsim simulator.

Importing this package (which ``import torch`` does by itself through the ``torch.backends``
entry point) renames PyTorch's PrivateUse1 backend to ``neuron``, registers ``torch.neuron`` and
the ``Tensor.neuron()`` / ``Module.neuron()`` helpers, and loads the native extension that
provides the kernels, allocator, streams and generators.
"""


def _autoload():
    """Entry point of PyTorch's ``torch.backends`` group.

    Defined before anything else: when ``import torch`` autoloads this package while this very
    package is importing torch, the entry point must already resolve. Importing the package is
    what registers the device, so there is nothing left to do here.
    """


import torch  # noqa: E402

from torch_neuronx import _C  # noqa: E402
from torch_neuronx import _registration  # noqa: E402

_registration.register()

from torch_neuronx import neuron  # noqa: E402
from torch_neuronx.neuron import (  # noqa: E402,F401
    Event,
    Stream,
    current_stream,
    device_count,
    empty_cache,
    is_available,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_peak_memory_stats,
    set_stream,
    stream,
    synchronize,
)
from torch_neuronx._tracking import (  # noqa: E402,F401
    clear_op_tracking,
    get_executed_ops,
    get_fallback_ops,
    kernel_trace,
)

__version__ = "2.13.0.0"


def is_neuron_runtime_initialized() -> bool:
    """Whether the nrtsim runtime has been initialised in this process."""
    return _C._is_initialized()


__all__ = [
    "Event",
    "Stream",
    "clear_op_tracking",
    "current_stream",
    "device_count",
    "empty_cache",
    "get_executed_ops",
    "get_fallback_ops",
    "is_available",
    "is_neuron_runtime_initialized",
    "kernel_trace",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "neuron",
    "reset_peak_memory_stats",
    "set_stream",
    "stream",
    "synchronize",
]
