"""Shared fixtures for the Python test suite. Every test compares neuron against CPU or a known
answer. Tests that need a different simulated topology run in a subprocess, because the runtime
reads its environment once per process."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_neuronx  # noqa: F401  (explicit, though autoload already registered the device)


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with `env` added to the environment."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def python_subprocess():
    return run_python


@pytest.fixture(autouse=True)
def _reset_current_device():
    yield
    if torch.neuron.is_initialized():
        torch.neuron.set_device(0)
