"""Registration of the process-group backend ``"neuron"`` with torch.distributed."""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

BACKEND_NAME = "neuron"

try:
    from torch_neuronx._C._distributed import ProcessGroupNeuron
except ImportError:  # torch built without distributed support
    ProcessGroupNeuron = None

# Set when this module chose the process's visible core (under torchrun), so that creating the
# process group may also start the runtime on it (see _create_backend).
_visible_cores_from_local_rank = False


def apply_torchrun_visible_cores() -> bool:
    """Under torchrun, make each process see only the core of its local rank, as TorchNeuron does.

    Only when the user has not chosen cores (``NEURON_RT_VISIBLE_CORES``) and the runtime has not
    started yet. Returns whether it set the variable.
    """
    global _visible_cores_from_local_rank
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is None or "TORCHELASTIC_RUN_ID" not in os.environ:
        return False
    if os.environ.get("NEURON_RT_VISIBLE_CORES") or os.environ.get("TORCH_NEURONX_KEEP_VISIBLE_CORES"):
        return False
    from torch_neuronx import _C

    if _C._is_initialized():
        return False
    os.environ["NEURON_RT_VISIBLE_CORES"] = local_rank
    _visible_cores_from_local_rank = True
    return True


def _create_backend(store, rank: int, size: int, timeout: timedelta):
    backend = ProcessGroupNeuron(store, rank, size, timeout)
    if _visible_cores_from_local_rank and torch.neuron.device_count() == 1:
        # The process owns exactly one core, neuron:0: start the runtime on it now, so that
        # DeviceMesh (which calls set_device(LOCAL_RANK) on an uninitialised device) keeps it.
        torch.neuron.init()
    return backend


def register() -> None:
    """Registers ``"neuron"`` with torch.distributed (idempotent)."""
    if ProcessGroupNeuron is None or not dist.is_available():
        return
    if BACKEND_NAME in dist.Backend.backend_list:
        return
    # "cpu" too: CPU tensors on a neuron group (what compiled programs hand to functional
    # collectives, object collectives' size exchange) take the same transport.
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["neuron", "cpu"])
