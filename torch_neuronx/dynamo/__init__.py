"""``torch.compile(backend="neuron")``: the Dynamo backend, Dynamo's device interface for
``neuron`` and TorchNeuron's compile metrics.

The backend is loaded on first use (Dynamo resolves the ``torch_dynamo_backends`` entry point
when ``torch.compile`` names it): importing Dynamo takes about two seconds, which ``import torch``
must not pay. The metrics functions are exported by ``torch_neuronx`` and import nothing heavy.
"""

from torch_neuronx.dynamo import program_cache  # noqa: F401  (cache artifact type for load_cache_artifacts)
from torch_neuronx.dynamo.metrics import get_dynamo_metrics, reset_dynamo_metrics

_BACKEND_NAMES = ("NeuronCompileError", "neuron_backend", "neuron_decompositions")


def __getattr__(name: str):
    if name in _BACKEND_NAMES:
        from torch_neuronx.dynamo import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["get_dynamo_metrics", "reset_dynamo_metrics", *_BACKEND_NAMES]
