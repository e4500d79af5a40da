"""``torch.neuron``: the neuron device module, mirroring ``torch.cuda`` as TorchNeuron does."""

import torch

from torch_neuronx.neuron import _utils  # noqa: F401  (torch.load reads torch.neuron._utils)
from torch_neuronx.neuron._utils import _get_device_index  # noqa: F401
from torch_neuronx.neuron._device import (  # noqa: F401
    NeuronDeviceProperties,
    _is_in_bad_fork,
    _lazy_init,
    current_device,
    device,
    device_count,
    device_of,
    get_amp_supported_dtype,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    set_device,
    synchronize,
    topology,
)
# TorchNeuron's compile metrics (torch.compile(backend="neuron")), also torch_neuronx's.
from torch_neuronx.dynamo.metrics import get_dynamo_metrics, reset_dynamo_metrics  # noqa: F401
from torch_neuronx.neuron.memory import (  # noqa: F401
    empty_cache,
    host_memory_stats,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
)
from torch_neuronx.neuron.random import (  # noqa: F401
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from torch_neuronx.neuron._storage import STORAGE_CLASSES as _STORAGE_CLASSES
from torch_neuronx.neuron.streams import (  # noqa: F401
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

# torch.neuron.FloatStorage and the other legacy storage classes (what Tensor.storage_type() returns).
globals().update(_STORAGE_CLASSES)


def __getattr__(name: str):
    # torch.utils.checkpoint saves and restores a device's RNG state around the recomputation only
    # if `torch.<device>._initialized` is true, a flag torch.cuda keeps; without it, recomputed
    # dropout draws a fresh mask and the gradients are silently wrong. Computed on each access, as
    # it changes once the runtime starts.
    if name == "_initialized":
        return is_initialized()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
