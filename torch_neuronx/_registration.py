"""Turns PrivateUse1 into the ``neuron`` device. Runs once, at import."""

import torch

DEVICE_NAME = "neuron"


def register() -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current == DEVICE_NAME and hasattr(torch, DEVICE_NAME):
        return  # already registered (a re-import)
    if current != "privateuseone":
        raise RuntimeError(
            f"torch_neuronx cannot register the 'neuron' device: PyTorch's PrivateUse1 backend "
            f"is already taken by '{current}'. Only one out-of-tree device backend can be loaded "
            f"per process; uninstall the other one or set TORCH_DEVICE_BACKEND_AUTOLOAD=0 and "
            f"import only torch_neuronx."
        )
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)

    from torch_neuronx import neuron

    torch._register_device_module(DEVICE_NAME, neuron)
    # Tensor.neuron(), Tensor.is_neuron, Module.neuron(), PackedSequence.neuron(), and the
    # storage methods that torch.load(map_location="neuron") relies on.
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
