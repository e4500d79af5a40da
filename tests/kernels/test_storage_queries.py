"""What a tensor says about its storage, on neuron as on the CPU: Tensor.is_set_to (whether two
tensors cover the same bytes; it answered False for every pair when it ran through the CPU
fallback on host copies) and Tensor.storage_type() / the legacy storage classes (torch.neuron.
FloatStorage, ..., as torch.cuda has them; storage_type() answered None)."""

import warnings

import pytest
import torch

DEV = "neuron"


@pytest.mark.parametrize("device", ["cpu", DEV])
def test_is_set_to(device):
    x = torch.arange(12.0, device=device).reshape(3, 4)
    y = torch.empty(0, device=device)
    y.set_(x)
    assert x.is_set_to(x)
    assert y.is_set_to(x) and x.is_set_to(y)
    assert not x.is_set_to(x.clone())
    assert not x.is_set_to(x.t())                 # same bytes, other strides
    assert not x.is_set_to(x[1:])                 # other offset and sizes
    assert not x.is_set_to(x.view(12))            # other sizes
    z = torch.empty(0, device=device).set_(x.untyped_storage(), 4, (2, 4), (4, 1))
    assert z.is_set_to(x[1:]) and not z.is_set_to(x)


def test_is_set_to_answers_without_the_cpu_fallback():
    import torch_neuronx

    x = torch.ones(3, device=DEV)
    torch_neuronx.clear_op_tracking()
    assert x.is_set_to(x)
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex64], ids=str)
def test_storage_type_names_the_neuron_storage_class(dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated in PyTorch
        x = torch.zeros(3, dtype=dtype, device=DEV)
        cls = x.storage_type()
        cpu_cls = x.cpu().storage_type()
        assert cls is not None and cls.__name__ == cpu_cls.__name__
        assert cls is getattr(torch.neuron, cpu_cls.__name__)
        assert cls.dtype == dtype
        assert isinstance(x.storage(), cls)
        assert not isinstance(x.cpu().storage(), cls)
        made = cls(4)
        assert made.device.type == DEV and made.dtype == dtype and made.size() == 4
