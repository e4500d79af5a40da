"""neuron:<LOCAL_RANK> in torch.distributed's Python checks, with one visible core per process.

Under torchrun each rank sees only its own core (NEURON_RT_VISIBLE_CORES=$LOCAL_RANK), so the
process has one device, neuron:0, and the core's number on the instance is a second name for it
(resolve_device_index in csrc/backend/core/NeuronRuntime.h: the guard, the hooks and torch.neuron
accept it, and tensors made on it are on neuron:0). Two places in torch check or use such an index
in Python before anything of ours runs, and both are in the path of code written for every core
visible (Accelerate prepares models with DDP(device_ids=[local_process_index])):

- init_process_group(device_id=...) rejects an index >= torch.accelerator.device_count();
- DistributedDataParallel(device_ids=[i]) moves every input to neuron:i (never equal to the
  inputs' neuron:0, so a copy each step) through a per-device stream list indexed by i, sized by
  device_count() (an IndexError for i > 0).

- FullyShardedDataParallel(device_id=i) (FSDP1) compares the parameters' device with neuron:i
  and raises "Inconsistent compute device".

Each gets the alias rewritten to neuron:0 on the way in, which is what it names; every other
argument passes through unchanged (and meets torch's own errors). FSDP1 is wrapped when its
module is first imported, not before: importing it costs most of a second, which `import torch`
should not pay."""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import sys

import torch

_MARK = "_neuron_local_rank_alias"


def one_core_index(index):
    """0 for the alias of the process's one core, anything else unchanged."""
    from torch_neuronx.neuron._device import _resolve_alias

    if isinstance(index, int) and not isinstance(index, bool):
        return _resolve_alias(index)
    return index


def one_core_device(device):
    """neuron:0 for neuron:<alias> (a torch.device or a string), anything else unchanged."""
    if isinstance(device, str) and device.startswith("neuron:"):
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "neuron" and device.index is not None:
        index = one_core_index(device.index)
        return device if index == device.index else torch.device("neuron", index)
    return device


def _on_neuron(module) -> bool:
    for t in module.parameters():
        return t.device.type == "neuron"
    for t in module.buffers():
        return t.device.type == "neuron"
    return False


def _wrap_init_process_group() -> None:
    from torch.distributed import distributed_c10d

    original = distributed_c10d.init_process_group
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        if "device_id" in kwargs:
            kwargs["device_id"] = _device_id_of(kwargs["device_id"])
        elif len(args) > 8:  # device_id is the ninth parameter
            args = (*args[:8], _device_id_of(args[8]), *args[9:])
        return original(*args, **kwargs)

    setattr(init_process_group, _MARK, True)
    distributed_c10d.init_process_group = init_process_group
    torch.distributed.init_process_group = init_process_group


def _wrap_ddp() -> None:
    ddp = torch.nn.parallel.DistributedDataParallel
    original = ddp.__init__
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
        # Plain ints name devices of the module's own type: rewrite them only for neuron modules.
        if _on_neuron(module):
            if device_ids:
                device_ids = [one_core_device(one_core_index(d)) for d in device_ids]
            output_device = one_core_device(one_core_index(output_device))
        original(self, module, device_ids, output_device, *args, **kwargs)

    setattr(__init__, _MARK, True)
    ddp.__init__ = __init__


def _device_id_of(device_id):
    """init_process_group's and FSDP1's `device_id`: an int names a device of the current
    accelerator's type (torch builds the device from it), a torch.device or string itself."""
    if isinstance(device_id, int) and not isinstance(device_id, bool):
        acc = torch.accelerator.current_accelerator()
        return one_core_index(device_id) if acc is not None and acc.type == "neuron" else device_id
    return one_core_device(device_id)


_FSDP1_MODULE = "torch.distributed.fsdp.fully_sharded_data_parallel"


def _wrap_fsdp1(module) -> None:
    fsdp = module.FullyShardedDataParallel
    original = fsdp.__init__
    if getattr(original, _MARK, False):
        return

    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        if bound.arguments.get("device_id") is not None:
            bound.arguments["device_id"] = _device_id_of(bound.arguments["device_id"])
        original(*bound.args, **bound.kwargs)

    setattr(__init__, _MARK, True)
    fsdp.__init__ = __init__


class _WrapFsdp1OnImport(importlib.abc.MetaPathFinder):
    """Finds FSDP1's module through the regular finders and has its loader wrap the class once
    the module has run. The loader stays the regular one (its source, resources and reload work
    as before); only its exec_module is wrapped, for this module alone."""

    def find_spec(self, name, path, target=None):
        if name != _FSDP1_MODULE:
            return None
        sys.meta_path.remove(self)  # one shot: the regular finders locate the module
        from importlib.util import find_spec

        spec = find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _wrap_fsdp1(module)

        spec.loader.exec_module = exec_module
        return spec


def _wrap_fsdp1_when_imported() -> None:
    if _FSDP1_MODULE in sys.modules:
        _wrap_fsdp1(sys.modules[_FSDP1_MODULE])
    elif not any(isinstance(f, _WrapFsdp1OnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _WrapFsdp1OnImport())


def accept_local_rank_device_indices() -> None:
    """Installs all three (idempotent); called when the backend is registered."""
    _wrap_init_process_group()
    _wrap_ddp()
    _wrap_fsdp1_when_imported()
