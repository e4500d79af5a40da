"""Random number generation on neuron: one default generator per device, CUDA's API over it.

Each generator's state is 16 bytes, (seed, offset), as CUDA's Philox state: save it with
get_rng_state() and restore it with set_rng_state() to replay the same numbers.
"""

from typing import Iterable, Union

import torch

from torch_neuronx import _C
from torch_neuronx.neuron._device import _check_device_index, _device_index, device_count

__all__ = [
    "default_generators",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]


def _generator(device=None) -> torch.Generator:
    return _C._default_generator(_check_device_index(_device_index(device)))


def _make_default_generators() -> tuple:
    return tuple(_C._default_generator(i) for i in range(device_count()))


default_generators: tuple = _make_default_generators()


def get_rng_state(device: Union[int, str, torch.device] = "neuron") -> torch.Tensor:
    """The RNG state of `device` as a 16-byte torch.ByteTensor (seed, offset)."""
    return _generator(device).get_state()


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: Union[int, str, torch.device] = "neuron") -> None:
    _generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format))


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    """Seed the current neuron device's generator."""
    if device_count() > 0:
        _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every neuron device's generator (torch.manual_seed calls this)."""
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a non-deterministic number."""
    if device_count() > 0:
        _generator().seed()


def seed_all() -> None:
    """Seed every device with the same non-deterministic number."""
    if device_count() == 0:
        return
    value = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(value)


def initial_seed() -> int:
    return _generator().initial_seed()
