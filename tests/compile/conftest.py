"""torch.compile tests share one Inductor cache under the repository's build/ directory, so a
second run of the suite reuses the compiled programs (the first run compiles them, a few seconds
each on two cores). Set before any test compiles: Inductor reads it when it first needs a cache."""

import os
import pathlib

import pytest
import torch

_CACHE = pathlib.Path(__file__).resolve().parents[2] / "build" / "inductor-cache"
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_CACHE))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test starts with no compiled frames and fresh metrics."""
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()
