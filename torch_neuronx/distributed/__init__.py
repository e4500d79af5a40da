"""The ``torch.distributed`` backend ``"neuron"``.

Importing torch_neuronx registers it (``import torch`` does that through the backend autoload), so
``init_process_group("neuron")``, ``init_process_group(device_id=torch.device("neuron"))`` and
``init_device_mesh("neuron", ...)`` work under ``torchrun``. One process runs per logical
NeuronCore; under ``torchrun`` each process sees only its own core
(``NEURON_RT_VISIBLE_CORES=$LOCAL_RANK``, as TorchNeuron sets it), so its device is ``neuron:0``,
which ``neuron:$LOCAL_RANK`` also names (code written for every core visible works unchanged).

The collectives are native (``ProcessGroupNeuron`` in C++, over nrtsim's shared-memory transport:
the simulated NeuronLink); a group whose ranks are on several hosts adds Gloo between the host
leaders (see ``gloo_devices`` for the interface it uses). See docs/distributed.md.
"""

from torch_neuronx.distributed._backend import (  # noqa: F401
    BACKEND_NAME,
    ProcessGroupNeuron,
    apply_torchrun_visible_cores,
    register,
)

__all__ = ["BACKEND_NAME", "ProcessGroupNeuron", "apply_torchrun_visible_cores", "register"]
