"""The legacy typed-storage classes of the neuron device (``torch.neuron.FloatStorage``, ...), as
``torch.cuda`` has them: ``Tensor.storage_type()`` answers with one of these (PyTorch looks the
class up in ``torch.<device>``, and without them it answered ``None``), ``isinstance(t.storage(),
torch.neuron.FloatStorage)`` holds, and ``torch.neuron.FloatStorage(n)`` makes a neuron storage.

PyTorch tells a legacy class's device from the last part of its module name, so each class is
made with the module name of ``torch.neuron``'s package.
"""

import types

import torch
from torch.storage import _LegacyStorage, _dtype_to_storage_type_map, _warn_typed_storage_removal

_MODULE = "torch_neuronx.neuron"


class _NeuronLegacyStorage(_LegacyStorage):
    @classmethod
    def from_buffer(cls, *args, **kwargs):
        _warn_typed_storage_removal()
        raise RuntimeError("from_buffer: not available for neuron storage (make a CPU storage and "
                           "move it with .to('neuron'))")

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError("_new_with_weak_ptr: not available for neuron storage")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError("_new_shared_filename: not available for neuron storage")


_NeuronLegacyStorage.__module__ = _MODULE


class _ClassProperty:
    def __init__(self, fget):
        self.fget = fget

    def __get__(self, instance, owner):
        return self.fget(owner)


def _storage_class(name: str, dtype: torch.dtype) -> type:
    def public_dtype(cls):
        _warn_typed_storage_removal()
        return dtype

    def body(namespace):
        namespace.update({
            "__module__": _MODULE,
            "__qualname__": name,
            "dtype": _ClassProperty(public_dtype),
            "_dtype": _ClassProperty(lambda cls: dtype),
        })

    return types.new_class(name, (_NeuronLegacyStorage,), exec_body=body)


STORAGE_CLASSES = {name: _storage_class(name, dtype)
                   for dtype, name in _dtype_to_storage_type_map().items()}
