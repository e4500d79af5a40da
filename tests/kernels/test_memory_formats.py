"""Memory formats computed as the CPU computes them: a format is a choice of strides, and every
kernel's result carries the CPU's strides and values, whether the format was asked for
(`memory_format=torch.channels_last` / `channels_last_3d` on a factory, a conversion, a copy) or
derived from the operands' layouts (two channels-last operands of `add` once gave NHWC data
labelled NCHW: the result took contiguous strides while the CPU loop wrote channels-last order).
TorchNeuron refuses the requested formats; the portability report names each request
(tests/portability)."""

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")

DEV = "neuron"
FORMATS = {
    "channels_last": (torch.channels_last, (2, 3, 4, 5)),
    "channels_last_3d": (torch.channels_last_3d, (2, 3, 2, 4, 5)),
}


def same(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Same device kind, dtype, sizes, strides and (bit for bit) values."""
    assert got.device.type == DEV
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert got.stride() == expected.stride(), (got.stride(), expected.stride())
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True)


def on_both(make_cpu):
    """The CPU tensor and a neuron tensor with the same sizes, strides and values."""
    cpu = make_cpu()
    neuron = torch.empty_strided(cpu.shape, cpu.stride(), dtype=cpu.dtype, device=DEV)
    neuron.copy_(cpu)
    return cpu, neuron


# --- formats asked for -----------------------------------------------------------------------

REQUESTS = {
    "empty": lambda x, f: torch.empty(x.shape, memory_format=f, device=x.device),
    "empty_like": lambda x, f: torch.empty_like(x, memory_format=f),
    "zeros_like": lambda x, f: torch.zeros_like(x, memory_format=f),
    "contiguous": lambda x, f: x.contiguous(memory_format=f),
    "to": lambda x, f: x.to(memory_format=f),
    "to_dtype": lambda x, f: x.to(torch.bfloat16, memory_format=f),
    "clone": lambda x, f: x.clone(memory_format=f),
    "resize_": lambda x, f: x.clone().resize_(x.shape, memory_format=f),
    "module_to": lambda x, f: torch.nn.Conv2d(3, 4, 1).to(x.device).to(memory_format=f).weight
    if x.dim() == 4 else torch.nn.Conv3d(3, 4, 1).to(x.device).to(memory_format=f).weight,
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("request_", REQUESTS)
def test_requested_format_has_the_cpu_strides_and_values(fmt, request_):
    memory_format, shape = FORMATS[fmt]
    call = REQUESTS[request_]
    torch.manual_seed(0)
    x_cpu, x = on_both(lambda: torch.randn(shape))
    if request_ == "module_to":
        torch.manual_seed(1)
        expected = call(x_cpu, memory_format)
        torch.manual_seed(1)
        got = call(x, memory_format)
    else:
        expected, got = call(x_cpu, memory_format), call(x, memory_format)
    assert got.is_contiguous(memory_format=memory_format)
    if request_ in ("empty", "empty_like", "resize_"):
        assert got.shape == expected.shape and got.stride() == expected.stride()
    else:
        same(got, expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_converted_tensor_computes_like_the_cpu(fmt):
    """A tensor converted on neuron goes through ops (conv, norm, pooling, arithmetic, backward)
    exactly as the CPU's converted tensor does."""
    memory_format, shape = FORMATS[fmt]
    torch.manual_seed(0)
    conv_cpu = (torch.nn.Conv2d if len(shape) == 4 else torch.nn.Conv3d)(3, 4, 3, padding=1)
    conv = (torch.nn.Conv2d if len(shape) == 4 else torch.nn.Conv3d)(3, 4, 3, padding=1)
    conv.load_state_dict(conv_cpu.state_dict())
    conv_cpu = conv_cpu.to(memory_format=memory_format)
    conv = conv.to(DEV).to(memory_format=memory_format)
    x_cpu = torch.randn(shape).contiguous(memory_format=memory_format).requires_grad_()
    x = x_cpu.detach().to(DEV).contiguous(memory_format=memory_format).requires_grad_()
    y_cpu = torch.relu(conv_cpu(x_cpu) * 2 + x_cpu.sum(1, keepdim=True))
    y = torch.relu(conv(x) * 2 + x.sum(1, keepdim=True))
    assert y.stride() == y_cpu.stride()
    torch.testing.assert_close(y.cpu(), y_cpu.detach())
    y_cpu.square().sum().backward()
    y.square().sum().backward()
    assert x.grad.stride() == x_cpu.grad.stride()
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)
    torch.testing.assert_close(conv.weight.grad.cpu(), conv_cpu.weight.grad)


# --- formats derived from the operands -------------------------------------------------------

def channels_last(fmt, dtype=torch.float32, seed=0):
    memory_format, shape = FORMATS[fmt]
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g)
    if dtype.is_floating_point:
        t = t.to(dtype)
    elif dtype == torch.bool:
        t = t > 0
    else:
        t = (t * 10).to(dtype)
    return t.contiguous(memory_format=memory_format)


OPS = {
    # binary arithmetic: the same-dtype fast path (add, sub, mul, div) and the general one
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "maximum": torch.maximum,
    "pow": lambda a, b: a.abs() ** b,
    "atan2": torch.atan2,
    "mixed_dtypes": lambda a, b: a + b.double(),
    "scalar": lambda a, b: a * 3,
    "cpu_scalar_tensor": lambda a, b: a * torch.tensor(2.5),
    "broadcast": lambda a, b: a + b[:, :1],
    # comparison and logic
    "lt": lambda a, b: a < b,
    "eq": lambda a, b: a == b,
    "logical_and": lambda a, b: torch.logical_and(a > 0, b > 0),
    # ternary
    "where": lambda a, b: torch.where(a > b, a, b),
    "addcmul": lambda a, b: torch.addcmul(a, a, b, value=0.5),
    "lerp": lambda a, b: torch.lerp(a, b, 0.25),
    "clamp_tensors": lambda a, b: torch.clamp(a, min=b, max=b + 1),
    # reductions keeping their dimensions, and scans
    "sum_keepdim": lambda a, b: (a * b).sum(1, keepdim=True),
    "amax_keepdim": lambda a, b: (a + b).amax(-1, keepdim=True),
    "mean_keepdim": lambda a, b: (a - b).mean((2, 3), keepdim=True),
    "cumsum": lambda a, b: (a + b).cumsum(1),
    "softmax": lambda a, b: torch.softmax(a * b, 1),
    # in-place and out=
    "add_": lambda a, b: a.clone().add_(b),
    "mul_out": lambda a, b: torch.mul(a, b, out=torch.empty_like(a)),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("op", OPS)
def test_two_channels_last_operands(fmt, op):
    a_cpu, b_cpu = channels_last(fmt, seed=1), channels_last(fmt, seed=2)
    a, b = a_cpu.to(DEV), b_cpu.to(DEV)
    assert a.stride() == a_cpu.stride()  # .to keeps the layout (preserve_format)
    same(OPS[op](a, b), OPS[op](a_cpu, b_cpu))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32, torch.int64,
                                   torch.uint8, torch.bool], ids=str)
def test_two_channels_last_operands_every_dtype(fmt, dtype):
    a_cpu, b_cpu = channels_last(fmt, dtype, seed=1), channels_last(fmt, dtype, seed=2)
    a, b = a_cpu.to(DEV), b_cpu.to(DEV)
    if dtype == torch.bool:
        same(a | b, a_cpu | b_cpu)
        same(a & b, a_cpu & b_cpu)
    else:
        same(a + b, a_cpu + b_cpu)
        same(a * b, a_cpu * b_cpu)


@pytest.mark.parametrize("layouts", ["cl+contiguous", "contiguous+cl", "cl+transposed"])
def test_mixed_layouts(layouts):
    a_cpu = channels_last("channels_last", seed=1)
    b_cpu = channels_last("channels_last", seed=2)
    if layouts == "cl+contiguous":
        b_cpu = b_cpu.contiguous()
    elif layouts == "contiguous+cl":
        a_cpu = a_cpu.contiguous()
    else:
        b_cpu = b_cpu.transpose(2, 3).contiguous().transpose(2, 3)
    a, b = a_cpu.to(DEV), b_cpu.to(DEV)
    for op in ("add", "mul", "div", "where", "lt"):
        same(OPS[op](a, b), OPS[op](a_cpu, b_cpu))


def test_issue_reproduction():
    """The case the issue reported: zero difference, not NHWC data read as NCHW."""
    x = torch.randn(1, 3, 2, 2).contiguous(memory_format=torch.channels_last)
    y = x.clone()
    diff = (x + y) - (x.to(DEV) + y.to(DEV)).cpu()
    assert diff.abs().max().item() == 0


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("layout", ["channels_last", "strided_permuted"])
def test_dropout_keeps_the_layout(train, layout):
    """native_dropout's output and mask have the CPU's strides (values are random: compared
    where they are not, p=0 and eval)."""
    x_cpu = torch.randn(2, 3, 4, 5)
    x_cpu = (x_cpu.contiguous(memory_format=torch.channels_last) if layout == "channels_last"
             else x_cpu.permute(0, 2, 3, 1)[:, ::2])
    x = x_cpu.to(DEV) if layout == "channels_last" else \
        torch.randn(2, 3, 4, 5).to(DEV).permute(0, 2, 3, 1)[:, ::2].copy_(x_cpu)
    for p in (0.5, 0.0):
        out_cpu, mask_cpu = torch.native_dropout(x_cpu, p, train)
        out, mask = torch.native_dropout(x, p, train)
        assert out.stride() == out_cpu.stride() and mask.stride() == mask_cpu.stride()
        if p == 0.0 or not train:
            same(out, out_cpu)
            same(mask, mask_cpu)
