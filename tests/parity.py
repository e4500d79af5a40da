"""What the parity suites (OpInfo, ModuleInfo, the layout fuzzer) share: their warning filters,
test-id dtype names, the mismatch they raise, how they compare the errors CPU and neuron raise on
one sample, and how they copy a sample's tensors to neuron keeping its layouts."""

import pytest
import torch
from torch.utils import _pytree as pytree

# Fallback notices and the samples' own deprecation warnings are noise here: the suites compare
# numbers, and their conftest.py reports the ops that went to the CPU fallback.
WARNING_FILTERS = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Mismatch(AssertionError):
    """Neuron and CPU disagree on one sample."""


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:500] if lines else ""


def both_raised(cpu_error, neuron_error, where: str) -> bool:
    """True when CPU raised and neuron raised the same type of exception; a Mismatch when only
    one of them raised or the types differ; False when neither raised."""
    if cpu_error is None and neuron_error is None:
        return False
    if cpu_error is None:
        raise Mismatch(
            f"{where}: neuron raised {type(neuron_error).__name__}: {first_line(neuron_error)}"
        )
    cpu = f"{type(cpu_error).__name__} ({first_line(cpu_error)})"
    if neuron_error is None:
        raise Mismatch(f"{where}: CPU raised {cpu}, neuron did not")
    if not isinstance(neuron_error, type(cpu_error)):
        raise Mismatch(
            f"{where}: CPU raised {cpu}, neuron "
            f"{type(neuron_error).__name__} ({first_line(neuron_error)})"
        )
    return True


class StorageCopier:
    """Copies tensors to `device` keeping sizes, strides, storage offsets and storage sharing, so
    neuron kernels see the layouts CPU's see; a leaf that requires grad stays a leaf that does."""

    def __init__(self, device: str):
        self.device = device
        self._storages: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}
        # id(t) -> (t, its copy). Holding t keeps its id from being reused by a later tensor
        # while this copier lives (a freed temporary's id otherwise maps a new tensor to the old
        # one's copy).
        self._tensors: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        if id(t) not in self._tensors:
            with torch.no_grad():
                if t.layout != torch.strided or t.is_conj() or t.is_neg():
                    result = t.to(self.device, copy=True)
                else:
                    storage = t.untyped_storage()
                    key = (storage.data_ptr(), storage.nbytes(), t.dtype)
                    if storage.nbytes() == 0:
                        # Empty storages all have data pointer 0: they share nothing.
                        key = (id(t), 0, t.dtype)
                    if key not in self._storages:
                        flat = torch.empty(0, dtype=t.dtype)
                        flat.set_(storage, 0, (storage.nbytes() // t.element_size(),), (1,))
                        self._storages[key] = flat.to(self.device, copy=True)
                    result = self._storages[key].as_strided(
                        t.size(), t.stride(), t.storage_offset()
                    )
            if t.requires_grad:
                result = result.detach().requires_grad_(True)
            self._tensors[id(t)] = (t, result)
        return self._tensors[id(t)][1]

    def __call__(self, value):
        return pytree.tree_map_only(torch.Tensor, self.tensor, value)
