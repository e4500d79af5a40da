"""torch.compile tests share one Inductor cache and one neuron program cache under the
repository's build/ directory, so a second run of the suite reuses the compiled programs (the
first run compiles them, a few seconds each on two cores). Set before any test compiles: Inductor
reads it when it first needs a cache."""

import os
import pathlib

import pytest
import torch

_BUILD = pathlib.Path(__file__).resolve().parents[2] / "build"
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_BUILD / "inductor-cache"))
# The neuron program cache likewise (the user's default is under ~/.cache): a second run of the
# suite loads its programs instead of compiling them.
os.environ.setdefault("TORCH_NEURONX_NEFF_CACHE_DIR", str(_BUILD / "neff-cache"))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test starts with no compiled frames and fresh metrics."""
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()
