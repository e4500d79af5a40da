"""NKI kernels as PyTorch ops: torch_neuronx.nki_op (custom op with a fake kernel, eager and
torch.compile(backend="neuron"), register_autograd) and torch_neuronx.wrap_nki (one graph node)."""

import numpy as np
import pytest
import torch

import nki
import nki.language as nl
import torch_neuronx
from torch_neuronx import nki_op, wrap_nki

U32 = np.finfo(np.float32).eps / 2


@nki.jit
def scaled_square_kernel(x, scale):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nl.multiply(nl.multiply(t, t), scale))
    return out


@nki_op("nki_tests::scaled_square", mutates_args={})
def scaled_square(x: torch.Tensor, scale: float) -> torch.Tensor:
    return scaled_square_kernel(x, scale)


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * 2 * ctx.scale * x, None


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


scaled_square.register_autograd(_backward, setup_context=_setup)


def test_nki_op_eager_on_neuron_and_cpu():
    x = torch.randn(128, 64)
    ref = x * x * 3.0  # two FP32 products, each rounded once, as the kernel does
    out = torch.ops.nki_tests.scaled_square(x.to("neuron"), 3.0)
    assert out.device.type == "neuron"
    assert torch.equal(out.cpu(), ref)
    assert torch.equal(scaled_square(x, 3.0), ref)


def test_nki_op_fake_kernel_gives_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(128, 32)
        out = torch.ops.nki_tests.scaled_square(x, 2.0)
    assert out.shape == (128, 32) and out.dtype == torch.float32


def test_nki_op_autograd():
    x = torch.randn(128, 16, requires_grad=True)
    xn = x.detach().to("neuron").requires_grad_()
    scaled_square(xn, 0.5).sum().backward()
    assert torch.allclose(xn.grad.cpu(), x.detach() * 1.0, rtol=2 * U32, atol=0)


def test_nki_op_under_torch_compile():
    def f(x):
        return torch.ops.nki_tests.scaled_square(x + 1, 2.0).sum(dim=1)

    x = torch.randn(128, 32)
    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    out = compiled(x.to("neuron"))
    ref = f(x)
    # The same arithmetic on both sides except the sum's order over 32 terms.
    assert torch.allclose(out.cpu(), ref, rtol=33 * U32, atol=0)


@nki.jit
def rowmax_kernel(x):
    out = nl.ndarray((x.shape[0], 1), x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nl.max(t, axis=1, keepdims=True))
    return out


def test_wrap_nki_one_graph_node():
    wrapped = wrap_nki(rowmax_kernel)
    seen = []

    def backend(gm, example_inputs):
        seen.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    def f(x):
        return wrapped(torch.relu(x)) * 2

    x = torch.randn(128, 40)
    ref = torch.relu(x).amax(dim=1, keepdim=True) * 2
    assert torch.equal(torch.compile(f, backend=backend, fullgraph=True)(x), ref)
    assert torch.ops.torch_neuronx.nki_call in seen[0]  # one node for the kernel
    out = torch.compile(f, backend="neuron", fullgraph=True)(x.to("neuron"))
    assert torch.equal(out.cpu(), ref)
    assert torch.equal(wrapped(x), x.amax(dim=1, keepdim=True))  # eager: the kernel itself
