"""Device spec that runs Hugging Face transformers' own test suite on the `neuron` device.

transformers' testing_utils imports the file named by TRANSFORMERS_TEST_DEVICE_SPEC and takes
the device name and its seed / cache / count functions from it (see docs/transformers_tests.md).
"""

import torch

import torch_neuronx  # noqa: F401  (autoload registers neuron already; explicit for clarity)

DEVICE_NAME = "neuron"

MANUAL_SEED_FN = torch.neuron.manual_seed
EMPTY_CACHE_FN = torch.neuron.empty_cache
DEVICE_COUNT_FN = torch.neuron.device_count
