"""The environment variables the Python layer reads, each declared and parsed here, and the data
files the package ships.

The runtime (csrc/runtime/Env) owns the variables it honours (``NRTSIM_*``, ``NEURON_RT_*``,
``NEURON_LOGICAL_NC_CONFIG``) and the backend's C++ reads its one switch
(``TORCH_NEURONX_FALLBACK_WARN``) through the runtime's parser; everything the Python code
reads is in ``VARIABLES`` below and is read through this module alone, so every variable has one
parser and one error, which names the variable, its value and what is accepted. A switch takes
the same words as the runtime's switches: 1, true, yes, on / 0, false, no, off, in any case; any
other value raises rather than being taken for one of them.

Values are read when used, not at import: a script may set a variable after importing the
package, and an import (which ``import torch`` triggers through autoload) never fails on one.
Variables owned by other programs (torchrun's ``LOCAL_RANK``, transformers' switches) are read
with :func:`foreign`, which only marks them as someone else's: they are parsed as their owner
defines them, by the code that uses them.
"""

import os
from dataclasses import dataclass
from typing import Optional

SWITCH_ON = ("1", "true", "yes", "on")
SWITCH_OFF = ("0", "false", "no", "off")
_SWITCH_WORDS = (f"one of {', '.join(SWITCH_ON)} (to turn it on) or {', '.join(SWITCH_OFF)} "
                 f"(to turn it off)")

DATA_DIR = os.path.join(os.path.dirname(__file__), "data")


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str  # "switch", "path", "seconds" or "list"
    default: object
    meaning: str


VARIABLES = {v.name: v for v in (
    # torch.compile(backend="neuron") (torch_neuronx/dynamo)
    Variable("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "switch", True,
             "a graph that cannot compile raises (on, TorchNeuron 2.33's default) or runs eagerly"),
    Variable("TORCH_NEURONX_STATIC_SHAPES", "switch", False,
             "strict mode: one program per input shape, as TorchNeuron"),
    Variable("TORCH_NEURONX_CPP_WRAPPER", "switch", True,
             "programs compiled in Inductor's C++ wrapper mode"),
    Variable("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "switch", False,
             "CPU tensors entering a compiled neuron graph raise instead of being copied"),
    # the program cache (torch_neuronx/dynamo/program_cache.py): TorchNeuron's NEFF cache names
    Variable("TORCH_NEURONX_DISABLE_NEFF_CACHE", "switch", False, "turns the program cache off"),
    Variable("TORCH_NEURONX_NEFF_DISABLE_CACHE", "switch", False,
             "turns the program cache off (TorchNeuron's other spelling)"),
    Variable("TORCH_NEURONX_NEFF_CACHE_DIR", "path", None,
             "the program cache's directory (default $XDG_CACHE_HOME/torch_neuronx/neff)"),
    Variable("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "path", None,
             "where the program cache's lock files go (default beside the entries)"),
    Variable("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "seconds", 600.0,
             "how long a process waits for another compiling the same program"),
    # the portability report (torch_neuronx/portability)
    Variable("TORCH_NEURONX_PORTABILITY_STRICT", "switch", False,
             "the portability report fails (exit status 1) when anything would differ"),
    Variable("TORCH_NEURONX_PORTABILITY_IGNORE", "list", (),
             "findings the portability report accepts: category or category:subject, comma-separated"),
    # the estimate (torch_neuronx/estimate)
    Variable("TORCH_NEURONX_ESTIMATE_DATA", "path", None,
             "the estimate's data file (default the shipped data/estimate.ini)"),
    # torch.distributed under torchrun (torch_neuronx/distributed)
    Variable("TORCH_NEURONX_KEEP_VISIBLE_CORES", "switch", False,
             "under torchrun, keep every core visible instead of the local rank's alone"),
    Variable("NRTSIM_LINK_MODEL", "path", None,
             "the link model file (default the shipped data/neuron_links.ini)"),
)}


def _declared(name: str, kind: str) -> Variable:
    variable = VARIABLES.get(name)
    if variable is None or variable.kind != kind:
        raise KeyError(f"{name} is not a declared {kind} variable of torch_neuronx._env")
    return variable


def _value(name: str) -> str | None:
    """The variable's value, or None when it is unset or empty (as the runtime's env::get)."""
    value = os.environ.get(name)
    return value if value else None


def parse_switch(name: str, text: str) -> bool:
    word = text.strip().lower()
    if word in SWITCH_ON:
        return True
    if word in SWITCH_OFF:
        return False
    raise ValueError(f"{name}={text!r} is not valid: expected {_SWITCH_WORDS}")


def switch(name: str) -> bool:
    """An on/off variable: its value, or its declared default when unset or empty."""
    variable = _declared(name, "switch")
    text = _value(name)
    return variable.default if text is None else parse_switch(name, text)


def path(name: str) -> str | None:
    """A file or directory variable, with ``~`` expanded; None when unset or empty."""
    _declared(name, "path")
    text = _value(name)
    return None if text is None else os.path.expanduser(text)


def seconds(name: str) -> float:
    """A duration in seconds (a positive number), or its declared default when unset."""
    variable = _declared(name, "seconds")
    text = _value(name)
    if text is None or not text.strip():
        return variable.default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name}={text!r} is not valid: expected a positive number of seconds, "
                         f"e.g. '{variable.default:g}' (the default), or unset it")
    return value


def words(name: str) -> tuple:
    """A comma-separated list: its non-empty items, stripped."""
    _declared(name, "list")
    text = _value(name) or ""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def foreign(name: str) -> str | None:
    """A variable another program defines and sets (torchrun's ``LOCAL_RANK``, the runtime's
    ``NEURON_RT_VISIBLE_CORES`` before the runtime starts): its raw value, None when unset."""
    return os.environ.get(name)


def data_file(name: str) -> str:
    """A data file shipped in torch_neuronx/data."""
    return os.path.join(DATA_DIR, name)
