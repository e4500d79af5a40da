"""The shipped TRANSFORMERS_TEST_DEVICE_SPEC file: transformers' own testing_utils takes neuron as
the test device from it, with neuron's seed, cache and device-count functions, and its
device-agnostic helpers then act on neuron."""

from pathlib import Path

SPEC_DIR = Path(__file__).resolve().parents[2] / "testing" / "transformers"

SCRIPT = """
import torch
from transformers import testing_utils as tu

assert tu.torch_device == "neuron", tu.torch_device
tu.backend_manual_seed("neuron", 1234)
a = torch.randn(8, device="neuron")
tu.backend_manual_seed("neuron", 1234)
b = torch.randn(8, device="neuron")
assert torch.equal(a.cpu(), b.cpu())
assert tu.backend_device_count("neuron") == torch.neuron.device_count() == 4
reserved = torch.neuron.memory_reserved()
x = torch.ones(1024, device="neuron")
del x
assert torch.neuron.memory_reserved() > reserved  # the freed block stays cached ...
tu.backend_empty_cache("neuron")
assert torch.neuron.memory_reserved() == reserved  # ... until the spec's EMPTY_CACHE_FN

# Accelerator-gated tests run on neuron; CUDA-only ones skip, as they should.
import unittest
ran = []
class T(unittest.TestCase):
    @tu.require_torch_accelerator
    def test_accelerator(self):
        ran.append(torch.zeros(2, device=tu.torch_device).device.type)
    @tu.require_torch_gpu
    def test_cuda_only(self):
        ran.append("cuda")
result = unittest.TextTestRunner(verbosity=0).run(unittest.defaultTestLoader.loadTestsFromTestCase(T))
assert result.wasSuccessful() and ran == ["neuron"], ran
print("SPEC OK")
"""


def test_transformers_takes_neuron_from_the_device_spec(python_subprocess, tmp_path):
    # transformers imports the spec by its path minus ".py", so it is named relative to the
    # working directory, as docs/transformers_tests.md tells users to do.
    script = tmp_path / "check_spec.py"
    script.write_text(SCRIPT)
    result = python_subprocess(
        f"import os, runpy; os.chdir({str(SPEC_DIR)!r}); runpy.run_path({str(script)!r})",
        env={"TRANSFORMERS_TEST_DEVICE_SPEC": "neuron_device_spec.py"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SPEC OK" in result.stdout
