"""Registration of the process-group backend ``"neuron"`` with torch.distributed."""

from __future__ import annotations

import functools
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from torch_neuronx import _env

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
    local_rank = _env.foreign("LOCAL_RANK")
    if local_rank is None or _env.foreign("TORCHELASTIC_RUN_ID") is None:
        return False
    if _env.foreign("NEURON_RT_VISIBLE_CORES") or _env.switch("TORCH_NEURONX_KEEP_VISIBLE_CORES"):
        return False
    from torch_neuronx import _C

    if _C._is_initialized():
        return False
    os.environ["NEURON_RT_VISIBLE_CORES"] = local_rank
    _visible_cores_from_local_rank = True
    return True


def link_model_path() -> str:
    """The link data file: NRTSIM_LINK_MODEL, else the one shipped in torch_neuronx/data."""
    return _env.path("NRTSIM_LINK_MODEL") or _env.data_file("neuron_links.ini")


def link_model(neuroncore: str, lnc: int) -> dict:
    """The NeuronLink figures of one logical core of generation `neuroncore` ("v3") made of `lnc`
    physical cores: bytes per ns (GB/s) and the fixed latency per collective in ns."""
    import configparser

    path = link_model_path()
    parser = configparser.ConfigParser()
    if not parser.read(path):
        raise RuntimeError(f"link model {path} cannot be read (unset NRTSIM_LINK_MODEL to use the shipped one)")
    if neuroncore not in parser:
        raise RuntimeError(f"link model {path} has no section [{neuroncore}] for NeuronCore-{neuroncore}")
    section = parser[neuroncore]
    try:
        return {
            "bytes_per_ns": float(section["neuronlink_gbytes_per_s"]) * lnc,
            "efa_bytes_per_ns": float(section["efa_gbytes_per_s"]) * lnc,
            "latency_ns": float(section["collective_latency_ns"]),
        }
    except (KeyError, ValueError) as e:
        raise RuntimeError(f"link model {path} [{neuroncore}]: {e}") from None


def _apply_link_model() -> None:
    # The cores of one host talk over NeuronLink, hosts over EFA.
    from torch_neuronx import _C

    if not _C._is_initialized() and torch.neuron.device_count() == 0:
        return
    from torch_neuronx._clock import core_model

    model = core_model()
    link = link_model(model["neuroncore"], int(model["lnc"]))
    _C._distributed._set_link_model(link["bytes_per_ns"], link["latency_ns"], link["efa_bytes_per_ns"])


def _address_towards(host: str, port: int) -> str:
    """This machine's address on the route to `host`: the interface the other hosts reach us on
    (a UDP connect sends nothing; it only asks the kernel for the route)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((host, port or 9))
        return s.getsockname()[0]


def gloo_devices():
    """The Gloo transport devices of the inter-host leg: GLOO_SOCKET_IFNAME's interfaces when set
    (as for backend "gloo"), else the address on the route to MASTER_ADDR (where torchrun's
    store runs, so on the network that joins the hosts), else Gloo's default (the hostname's
    address)."""
    from torch.distributed import ProcessGroupGloo

    names = _env.foreign("GLOO_SOCKET_IFNAME") or ""
    if names:
        return [ProcessGroupGloo.create_device(interface=name) for name in names.split(",") if name]
    master = _env.foreign("MASTER_ADDR")
    if master:
        try:
            address = _address_towards(master, int(_env.foreign("MASTER_PORT") or 0))
        except OSError as e:
            raise RuntimeError(
                f"neuron process group: no route from this host to MASTER_ADDR={master} ({e}); "
                "set GLOO_SOCKET_IFNAME to the interface that reaches the other hosts"
            ) from None
        return [ProcessGroupGloo.create_device(hostname=address)]
    return [ProcessGroupGloo.create_default_device()]


def _create_gloo(store, rank: int, size: int, timeout: timedelta):
    """The Gloo group of a neuron group's inter-host leg (called from C++, see HostSpan.h)."""
    from torch.distributed import ProcessGroupGloo

    options = ProcessGroupGloo._Options()
    options._timeout = timeout
    options._devices = gloo_devices()
    return ProcessGroupGloo(store, rank, size, options)


def check_local_ranks_fit() -> None:
    """Under torchrun's layout each local rank takes the core of its number: a host with more
    local ranks than the simulated instance has cores cannot run the job. Say so in those terms
    (the instance, its cores, the instances with more), not in the terms of the variable this
    module set for the user (NEURON_RT_VISIBLE_CORES)."""
    if not _visible_cores_from_local_rank:
        return
    from torch_neuronx import _C

    local_rank = int(_env.foreign("LOCAL_RANK"))
    local_world = int(_env.foreign("LOCAL_WORLD_SIZE") or local_rank + 1)
    info = _C._distributed._instance_cores()
    cores = info["cores"]
    if local_rank < cores and local_world <= cores:
        return
    bigger = [f"{name} ({n} cores)" for name, n in info["presets"] if n >= local_world]
    choice = (
        "choose an instance with enough: NRTSIM_INSTANCE=" + " or ".join(bigger)
        if bigger
        else f"no simulated instance has {local_world} cores; run the job on several hosts"
    )
    raise RuntimeError(
        f"torchrun started {local_world} processes on this host, one per NeuronCore (local rank "
        f"{local_rank} takes core {local_rank}), but the simulated instance {info['instance']} has "
        f"{cores} logical NeuronCores (NEURON_LOGICAL_NC_CONFIG={info['lnc']}): run at most {cores} "
        f"processes per host (torchrun --nproc-per-node {cores}), or {choice}"
    )


def _create_backend(store, rank: int, size: int, timeout: timedelta):
    check_local_ranks_fit()
    backend = ProcessGroupNeuron(store, rank, size, timeout)
    _apply_link_model()
    if _visible_cores_from_local_rank and torch.neuron.device_count() == 1:
        # The process owns exactly one core, neuron:0: start the runtime on it now, so that
        # DeviceMesh (which calls set_device(LOCAL_RANK) on an uninitialised device) keeps it.
        torch.neuron.init()
    return backend


def _perform_nocolor_split(self, device) -> None:
    """new_group on a rank outside the new group, when the default group is bound to a device:
    NCCL's communicator split needs every rank of the parent; a neuron group is created by its
    members alone (its rendezvous is the Store), so there is nothing to do."""


def _options(self):
    """Backend options for split_group, which deep-copies them (the C++ Options cannot be). Its
    timeout is the default one: split_group passes the child's timeout on its own."""
    from torch._C._distributed_c10d import Backend as _CBackend

    class Options(_CBackend.Options):
        def __deepcopy__(self, memo):
            return Options(self.backend, self._timeout)

    return Options(BACKEND_NAME, dist.default_pg_timeout)


def _set_default_backend_of_mixed_groups() -> None:
    """A group made from a multi-backend string such as ``"cpu:gloo,neuron:neuron"`` gets the
    registered plugin's type as its default backend in torch's intent, but torch compares the
    plugin's upper-case key with the string's lower-case names and sets none (torch 2.13). Such a
    group then warns "No backend of type 0 found ..." on every rank at destroy_process_group.
    Its default becomes the plugin's type here, after torch built the group."""
    from torch._C._distributed_c10d import ProcessGroup
    from torch.distributed import distributed_c10d as c10d

    build = c10d._new_process_group_helper
    if getattr(build, "_neuron_default_backend", False):
        return

    @functools.wraps(build)
    def build_with_default_backend(group_size, group_rank, global_ranks_in_group, backend, *args,
                                   **kwargs):
        pg, store = build(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs)
        if (isinstance(pg, ProcessGroup) and pg._get_backend_name() == "undefined"
                and BACKEND_NAME in c10d.BackendConfig(backend).get_device_backend_map().values()):
            pg._set_default_backend(ProcessGroup.BackendType.CUSTOM)
        return pg, store

    build_with_default_backend._neuron_default_backend = True
    c10d._new_process_group_helper = build_with_default_backend


def _name_custom_groups_by_their_backend() -> None:
    """pg.name() of a group whose default backend is this plugin answers "neuron", as TorchNeuron's
    process group does (and as NCCL's and Gloo's answer their names). c10d names a plugin's
    groups by backend type, "custom", for every plugin alike; the backend itself knows its name."""
    from torch._C._distributed_c10d import ProcessGroup

    original = ProcessGroup.name
    if getattr(original, "_neuron_names", False):
        return

    @functools.wraps(original)
    def name(self):
        answer = original(self)
        if answer != "custom":
            return answer
        try:
            return self._get_backend(torch.device(BACKEND_NAME)).name()
        except RuntimeError:
            return answer

    name._neuron_names = True
    ProcessGroup.name = name


def _work_sequence_numbers() -> None:
    """Work.get_sequence_number(): the group's number of the call, as TorchNeuron's NeuronWork
    answers (c10d's Python Work does not bind the C++ virtual behind it)."""
    from torch._C._distributed_c10d import Work

    if hasattr(Work, "get_sequence_number"):
        return
    from torch_neuronx import _C

    def get_sequence_number(self) -> int:
        return _C._distributed._work_sequence_number(self)

    Work.get_sequence_number = get_sequence_number


def register() -> None:
    """Registers ``"neuron"`` with torch.distributed (idempotent)."""
    if ProcessGroupNeuron is None or not dist.is_available():
        return
    if BACKEND_NAME in dist.Backend.backend_list:
        return
    from torch_neuronx import _C

    _C._distributed._set_gloo_factory(_create_gloo)
    ProcessGroupNeuron.perform_nocolor_split = _perform_nocolor_split
    ProcessGroupNeuron.options = property(_options)
    # "cpu" too: CPU tensors on a neuron group (what compiled programs hand to functional
    # collectives, object collectives' size exchange) take the same transport.
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["neuron", "cpu"])
    _set_default_backend_of_mixed_groups()
    _name_custom_groups_by_their_backend()
    _work_sequence_numbers()
    from torch_neuronx.distributed._local_rank import accept_local_rank_device_indices

    accept_local_rank_device_indices()
