"""torch.multiprocessing and neuron tensors: sending one to another process is a clear error.

CUDA shares a tensor between processes by handing the receiver an IPC handle to the same device
memory. A NeuronCore has no such thing: the Neuron runtime gives each core to one process, and
here nrtsim's HBM is that process's own host memory, so there is nothing another process could
open. Copying through CPU shared memory instead would look like sharing but silently break it
(a worker's in-place update, as in Hogwild training, would never reach the sender), so the
transfer raises, naming the limit and the fix, instead of PyTorch's "_share_fd_: only available
on CPU". CPU tensors are shared exactly as before.

The check wraps the reducers torch.multiprocessing registers with multiprocessing's
ForkingPickler (Queue, Pipe, SimpleQueue, and the arguments of spawned processes all pickle
through it), so it applies wherever a tensor or storage crosses a process boundary.
"""

import functools
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing.reductions as _torch_reductions

_TORCH_REDUCERS = (
    _torch_reductions.reduce_tensor,
    _torch_reductions.reduce_storage,
    _torch_reductions.reduce_typed_storage,
    _torch_reductions.reduce_typed_storage_child,
)


def _describe(obj) -> str:
    if isinstance(obj, torch.Tensor):
        return f"a {obj.dtype} tensor of shape {tuple(obj.shape)} on {obj.device}"
    storage = obj._untyped_storage if isinstance(obj, torch.storage.TypedStorage) else obj
    return f"a storage of {storage.nbytes()} bytes on {storage.device}"


def sharing_error(obj) -> RuntimeError:
    return RuntimeError(
        f"Cannot send {_describe(obj)} to another process (torch.multiprocessing): neuron "
        "tensors cannot be shared between processes. A NeuronCore's memory belongs to the one "
        "process that owns the core (nrtsim's HBM is that process's host memory), so there is no "
        "handle another process could open, as CUDA IPC has; a copy would silently drop in-place "
        "updates made on the other side. Send a CPU tensor instead (tensor.cpu(); CPU tensors go "
        "through shared memory without a further copy) and move it in the receiving process with "
        ".to('neuron')."
    )


def _device_type(obj) -> str:
    # A TypedStorage's own .device warns that TypedStorage is deprecated, and torch pickles one
    # for every CPU tensor it shares: read the untyped storage underneath instead.
    if isinstance(obj, torch.storage.TypedStorage):
        return obj._untyped_storage.device.type
    return obj.device.type


def _refusing_neuron(reducer):
    @functools.wraps(reducer)
    def reduce(obj):
        if _device_type(obj) == "neuron":
            raise sharing_error(obj)
        return reducer(obj)

    return reduce


def install() -> None:
    """Wraps torch.multiprocessing's tensor and storage reducers (registered when torch imports
    torch.multiprocessing, before device backends load). Idempotent."""
    for cls, reducer in list(ForkingPickler._extra_reducers.items()):
        if reducer in _TORCH_REDUCERS:  # a wrapped one is not, so installing twice is harmless
            ForkingPickler.register(cls, _refusing_neuron(reducer))
