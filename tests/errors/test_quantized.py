"""Quantized tensors are not supported on neuron, as in TorchNeuron (its operator table lists the
quantized variants as unsupported): every way to make one raises one clear error that names the
op, the dtype and the fix (keep quantized tensors on the CPU), runs nothing through the CPU
fallback, leaks no device memory, and leaves the device usable. The fix it names works."""

import gc
import warnings

import pytest
import torch

import torch_neuronx

# PyTorch 2.13 deprecates creating quantized tensors (pytorch/pytorch#184982); the CPU side here
# still does, to show the supported route.
pytestmark = pytest.mark.filterwarnings(
    "ignore:torch.quantize_per_tensor, torch.quantize_per_channel"
)

QUANTIZED_DTYPES = [torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4]


def _float(shape=(2, 4)):
    return torch.linspace(-1, 1, 8).reshape(shape)


def _cases():
    x = _float()
    xn = x.to("neuron")
    with warnings.catch_warnings():  # runs at collection too, outside pytestmark's filter
        warnings.simplefilter("ignore", UserWarning)
        cpu_q = torch.quantize_per_tensor(x, 0.01, 3, torch.qint8)
    return {
        "quantize_per_tensor": (
            "aten::quantize_per_tensor", "torch.qint8",
            lambda: torch.quantize_per_tensor(xn, 0.01, 3, torch.qint8)),
        "quantize_per_tensor(tensor qparams)": (
            "aten::quantize_per_tensor.tensor_qparams", "torch.quint8",
            lambda: torch.quantize_per_tensor(
                xn, torch.tensor(0.01, device="neuron"), torch.tensor(3, device="neuron"),
                torch.quint8)),
        "quantize_per_tensor(list)": (
            "aten::quantize_per_tensor.tensors", "torch.qint8",
            lambda: torch.quantize_per_tensor(
                [xn], torch.tensor([0.01], device="neuron"), torch.tensor([3], device="neuron"),
                torch.qint8)),
        "quantize_per_tensor_dynamic": (
            "aten::quantize_per_tensor_dynamic", "torch.quint8",
            lambda: torch.quantize_per_tensor_dynamic(xn, torch.quint8, False)),
        "quantize_per_channel": (
            "aten::quantize_per_channel", "torch.qint8",
            lambda: torch.quantize_per_channel(
                xn, torch.tensor([0.01, 0.02], device="neuron"),
                torch.tensor([0, 1], device="neuron"), 0, torch.qint8)),
        "_make_per_tensor_quantized_tensor": (
            "aten::_make_per_tensor_quantized_tensor", None,
            lambda: torch._make_per_tensor_quantized_tensor(
                torch.zeros(4, dtype=torch.int8, device="neuron"), 0.1, 0)),
        "_empty_affine_quantized": (
            "aten::_empty_affine_quantized", "torch.qint8",
            lambda: torch._empty_affine_quantized(
                [4], scale=0.1, zero_point=0, dtype=torch.qint8, device="neuron")),
        "quantized CPU tensor .to(neuron)": (
            "aten::empty_quantized", "torch.qint8", lambda: cpu_q.to("neuron")),
        "quantized CPU tensor .neuron()": (
            "aten::empty_quantized", "torch.qint8", lambda: cpu_q.neuron()),
        "float neuron tensor .to(qint32)": (
            "aten::empty_strided", "torch.qint32", lambda: xn.to(torch.qint32)),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_quantizing_on_neuron_is_a_clear_error(case):
    op, dtype, call = _cases()[case]
    gc.collect()  # earlier tests' tracebacks may still hold device tensors
    torch.neuron.synchronize()
    allocated = torch.neuron.memory_allocated()
    torch_neuronx.clear_op_tracking()
    with pytest.raises(NotImplementedError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{op}: quantized tensors"), message
    assert "not supported on neuron" in message and "on the CPU" in message
    assert "dequantize()" in message
    if dtype is not None:
        assert f"(here {dtype})" in message
    assert torch_neuronx.get_fallback_ops() == [], "nothing may run through the CPU fallback"
    del info
    gc.collect()
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == allocated
    torch.testing.assert_close((_float().to("neuron") * 2).cpu(), _float() * 2)


@pytest.mark.parametrize("dtype", QUANTIZED_DTYPES, ids=str)
@pytest.mark.parametrize("factory", ["empty", "zeros", "ones", "empty_strided"])
def test_quantized_factories_name_the_dtype(factory, dtype):
    make = {
        "empty": lambda: torch.empty(4, dtype=dtype, device="neuron"),
        "zeros": lambda: torch.zeros(4, dtype=dtype, device="neuron"),
        "ones": lambda: torch.ones(4, dtype=dtype, device="neuron"),
        "empty_strided": lambda: torch.empty_strided((4,), (1,), dtype=dtype, device="neuron"),
    }[factory]
    with pytest.raises(NotImplementedError, match=rf"quantized tensors \(here {dtype}\) are not "
                                                  r"supported on neuron"):
        make()


def test_the_named_fix_works():
    """Quantize and run quantized ops on the CPU, move the dequantized result to neuron: the same
    numbers as dequantizing on the CPU, and neuron math on them matches the CPU's."""
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))
    q = torch.quantize_per_tensor(x, 0.05, 2, torch.quint8)
    on_neuron = q.dequantize().to("neuron")
    assert on_neuron.dtype == torch.float32
    assert torch.equal(on_neuron.cpu(), q.dequantize())
    w = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close((on_neuron @ w.to("neuron")).cpu(), q.dequantize() @ w)
    # int_repr is a plain uint8 tensor: low-bit weights live on neuron as such and scale in float.
    codes = q.int_repr().to("neuron")
    scaled = (codes.float() - q.q_zero_point()) * q.q_scale()
    assert torch.equal(scaled.cpu(), q.dequantize())


@pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")
def test_fake_quantization_is_float_and_works():
    """Quantization-aware training's fake quantization is float math, not a quantized dtype: it
    runs on neuron and matches the CPU."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(2))
    got = torch.fake_quantize_per_tensor_affine(x.to("neuron"), 0.1, 0, -128, 127)
    assert torch.equal(got.cpu(), torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127))
