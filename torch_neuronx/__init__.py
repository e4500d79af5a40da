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


import atexit  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from torch_neuronx import _C  # noqa: E402

# The simulated clock's per-engine model of each Trainium generation: an editable data file
# (NRTSIM_ENGINE_MODEL names another one). Set before anything can start the runtime.
from torch_neuronx import _env  # noqa: E402

_C._set_engine_model_path(_env.data_file("neuron_cores.ini"))
from torch_neuronx import _registration  # noqa: E402

_registration.register()

# The process-group backend "neuron"; under torchrun each process sees the core of its local rank.
from torch_neuronx import distributed as _distributed  # noqa: E402

_distributed.apply_torchrun_visible_cores()
_distributed.register()


def _let_autograd_device_threads_finish() -> None:
    """atexit: hand the GIL to autograd's neuron device threads one last time.

    Every backward pass stashes a Python object (a contextvars copy) in the graph task, and a
    device thread may drop the last reference to that task just after backward() returns. If the
    interpreter is already finalizing when that thread takes the GIL for the decref, CPython ends
    the thread inside a noexcept destructor and the process aborts ("terminate called without an
    active exception", exit code 134): a script that ends right after loss.backward() crashed
    most of the time. Sleeping here, before finalization, lets the waiting thread finish.
    """
    if _C._is_initialized():
        time.sleep(0.01)


atexit.register(_let_autograd_device_threads_finish)

# Backward passes over neuron tensors run on the thread that calls backward(), as CPU ones do,
# instead of being handed to one autograd worker thread per device. nrtsim executes every kernel
# on the host, synchronously, so a worker thread brings no overlap, only a handoff: measured on a
# chain of small ops, 60 us more per backward() call and 4 us more per graph node. The setting is
# PyTorch's own (thread-local, for the importing thread); set_multithreading_enabled(True)
# restores the worker threads, and backward() from other threads uses them as usual.
torch.autograd.set_multithreading_enabled(False)

# torch.compile without a backend: graphs on neuron tensors compile with the neuron backend, as
# TorchNeuron selects it on a Neuron device (Inductor has no neuron code generation).
from torch_neuronx.dynamo import default_backend as _default_backend  # noqa: E402

_default_backend.install()

from torch_neuronx import neuron  # noqa: E402
from torch_neuronx import multiprocessing as _multiprocessing  # noqa: E402

# Sending a neuron tensor to another process (torch.multiprocessing) raises a clear error.
_multiprocessing.install()

# What TorchNeuron exports at top level beside torch.neuron: the same objects, so that
# torch_neuronx.set_device is torch.neuron.set_device.
from torch_neuronx.neuron import (  # noqa: E402,F401
    Event,
    Stream,
    current_device,
    current_stream,
    default_stream,
    device,
    device_count,
    empty_cache,
    get_device_properties,
    get_dynamo_metrics,
    is_available,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_dynamo_metrics,
    reset_peak_memory_stats,
    set_device,
    set_stream,
    stream,
    synchronize,
)
from torch_neuronx._clock import core_model, simulated_time  # noqa: E402,F401
# NKI: `from torch_neuronx import nki_op, nki` as on TorchNeuron; `nki` is the top-level package.
import nki  # noqa: E402,F401
from torch_neuronx.nki_op import nki_op, wrap_nki  # noqa: E402,F401
from torch_neuronx.profiler import NeuronProfiler  # noqa: E402,F401
from torch_neuronx._tracking import (  # noqa: E402,F401
    clear_op_tracking,
    get_executed_ops,
    get_fallback_ops,
    clear_kernel_trace,
    kernel_trace,
)
# What would differ on TorchNeuron 2.33 (docs/portability.md); hooks into Dynamo and transformers
# only while a check runs.
from torch_neuronx.portability import portability_report  # noqa: E402,F401

__version__ = "2.13.0.0"


def is_neuron_runtime_initialized() -> bool:
    """Whether the nrtsim runtime has been initialised in this process."""
    return _C._is_initialized()


__all__ = [
    "Event",
    "NeuronProfiler",
    "Stream",
    "clear_op_tracking",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_device_properties",
    "get_dynamo_metrics",
    "get_executed_ops",
    "get_fallback_ops",
    "is_available",
    "is_neuron_runtime_initialized",
    "clear_kernel_trace",
    "core_model",
    "simulated_time",
    "kernel_trace",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "neuron",
    "nki",
    "nki_op",
    "portability_report",
    "reset_accumulated_memory_stats",
    "reset_dynamo_metrics",
    "reset_peak_memory_stats",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
    "wrap_nki",
]
