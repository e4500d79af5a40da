"""Functional add/sub/mul/div against the CPU. Operands of one dtype on one neuron device run
ATen's CPU loop directly over the neuron buffers (HbmTensorIterator); everything else (mixed
dtypes, CPU scalars, Python numbers) runs on host views. Both must give the CPU's bits, dtype,
shape and strides, and one launch record with the same work."""

import pytest
import torch

import torch_neuronx

OPS = {
    "add": lambda a, b: torch.add(a, b, alpha=2),
    "sub": lambda a, b: torch.sub(a, b, alpha=3),
    "mul": torch.mul,
    "div": torch.div,
}

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.uint8, torch.int8, torch.complex64]


def make(shape, dtype, g):
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g) + 0.5).to(dtype)
    return torch.randint(1, 9, shape, generator=g).to(dtype)


def check_same(result, expected):
    assert result.device.type == "neuron"
    assert result.dtype == expected.dtype
    assert result.shape == expected.shape
    assert result.stride() == expected.stride()
    # The same CPU loop on the same bytes: bit-identical, NaNs included.
    torch.testing.assert_close(result.cpu(), expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_same_dtype_matches_cpu(name, dtype):
    g = torch.Generator().manual_seed(0)
    a, b = make((3, 5), dtype, g), make((3, 5), dtype, g)
    check_same(OPS[name](a.to("neuron"), b.to("neuron")), OPS[name](a, b))


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize(
    "shapes",
    [((4, 1, 3), (5, 1)), ((0, 3), (3,)), ((), ()), ((2, 3), ())],
    ids=["broadcast", "empty", "zero-dim", "neuron-scalar"],
)
def test_broadcasting_matches_cpu(name, shapes):
    g = torch.Generator().manual_seed(1)
    a, b = make(shapes[0], torch.float32, g), make(shapes[1], torch.float32, g)
    check_same(OPS[name](a.to("neuron"), b.to("neuron")), OPS[name](a, b))


@pytest.mark.parametrize("name", sorted(OPS))
def test_strided_operands_give_cpu_strides(name):
    # A transposed operand: TensorIterator picks the output's memory order from its operands.
    g = torch.Generator().manual_seed(2)
    a = make((6, 4), torch.float32, g).t()
    b = make((4, 6), torch.float32, g)[:, ::1]
    check_same(OPS[name](a.to("neuron").t().t(), b.to("neuron")), OPS[name](a, b))
    both_t = OPS[name](a.to("neuron"), make((6, 4), torch.float32, g).to("neuron").t())
    assert both_t.stride() == (1, 4)


@pytest.mark.parametrize("name", sorted(OPS))
def test_large_tensor_matches_cpu(name):
    # Large enough for ATen's parallel loop to split the work.
    g = torch.Generator().manual_seed(3)
    a, b = make((1 << 17,), torch.float32, g), make((1 << 17,), torch.float32, g)
    check_same(OPS[name](a.to("neuron"), b.to("neuron")), OPS[name](a, b))


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize(
    "other",
    [lambda: torch.tensor(3, dtype=torch.int64), lambda: 2.5,
     lambda: torch.ones(3, 5, dtype=torch.float64)],
    ids=["cpu-scalar", "python-number", "mixed-dtype"],
)
def test_promoting_operands_match_cpu(name, other):
    g = torch.Generator().manual_seed(4)
    a = make((3, 5), torch.float32, g)
    o = other()
    o_dev = o.to("neuron") if isinstance(o, torch.Tensor) and o.dim() > 0 else o
    check_same(OPS[name](a.to("neuron"), o_dev), OPS[name](a, o))


def test_integer_division_is_true_division():
    a = torch.tensor([7, -7, 1], dtype=torch.int32)
    b = torch.tensor([2, 2, 3], dtype=torch.int32)
    check_same(torch.div(a.to("neuron"), b.to("neuron")), torch.div(a, b))
    assert torch.div(a.to("neuron"), b.to("neuron")).dtype == torch.float32


def test_errors_match_cpu():
    t = torch.ones(3, dtype=torch.bool, device="neuron")
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool"):
        torch.sub(t, t)
    i = torch.ones(3, dtype=torch.int64, device="neuron")
    with pytest.raises(RuntimeError, match="alpha"):
        torch.add(i, i, alpha=0.5)
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.ones(3, device="neuron") + torch.ones(4, device="neuron")
    with pytest.raises(RuntimeError, match="neuron"):
        torch.ones(3, device="neuron") + torch.ones(3)


def test_one_record_with_the_work():
    a = torch.ones(4, 8, device="neuron")
    b = torch.ones(8, device="neuron")
    torch_neuronx.clear_kernel_trace()
    a * b
    rows = [r for r in torch_neuronx.kernel_trace() if r["op"] == "aten::mul.Tensor"]
    assert len(rows) == 1 and rows[0]["launches"] == 1
    assert rows[0]["engine"] == "vector"
    assert rows[0]["ops"]["vector"] == 32
    # Inputs once each (the broadcast one at its own size), the output once.
    assert rows[0]["bytes_read"] == (32 + 8) * 4
    assert rows[0]["bytes_written"] == 32 * 4


def test_second_device_result_stays_there():
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two neuron devices")
    a = torch.arange(4.0, device="neuron:1")
    r = a + a
    assert r.device == torch.device("neuron:1")
    torch.testing.assert_close(r.cpu(), torch.arange(4.0) * 2, rtol=0, atol=0)
