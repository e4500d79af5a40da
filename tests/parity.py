"""What the parity suites (OpInfo, ModuleInfo) share: their warning filters, test-id dtype names,
the mismatch they raise and how they compare the errors CPU and neuron raise on one sample."""

import pytest
import torch

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
