"""``nki.collectives``: collective communication between NeuronCores from inside a kernel (NKI
0.6). The interpreter runs one kernel on one NeuronCore and does not model transfers between
cores or ranks: every call raises an NkiError saying so (docs/nki.md lists them). Collectives of
PyTorch programs run through torch.distributed's "neuron" backend instead."""

from __future__ import annotations

from nki import _core

_WHY = ("in-kernel collectives (transfers between NeuronCores and ranks) are not modelled by "
        "this interpreter; use torch.distributed's 'neuron' backend around the kernel")


def _refused(name):
    def f(*args, **kwargs):
        raise _core.error(f"nki.collectives.{name}: {_WHY}")

    f.__name__ = name
    _core.refused(f"nki.collectives.{name}", _WHY)
    return f


class ReplicaGroup(_core.NKIObject):
    """A group of ranks of a collective (accepted; the collectives themselves are refused):
    ``ReplicaGroup(groups)``, the groups as lists of ranks."""

    groups: list = None


for _name in ("all_gather", "all_gather_v", "all_reduce", "all_to_all", "all_to_all_v",
              "collective_permute", "collective_permute_implicit",
              "collective_permute_implicit_current_processing_rank_id",
              "collective_permute_implicit_reduce", "rank_id", "reduce_scatter"):
    globals()[_name] = _refused(_name)
_core.refused("nki.collectives.ReplicaGroup", _WHY)
