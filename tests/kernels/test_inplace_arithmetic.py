"""In-place add_/sub_/mul_/div_ (unboxed kernels) against the CPU: broadcasting, scalars, alpha,
aliasing, type-promotion errors."""

import pytest
import torch

OPS = {
    "add_": lambda s, o: s.add_(o, alpha=0.5),
    "sub_": lambda s, o: s.sub_(o, alpha=2),
    "mul_": lambda s, o: s.mul_(o),
    "div_": lambda s, o: s.div_(o),
}


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("other_shape", [(4, 5), (5,), (1, 5), ()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_cpu(name, other_shape, dtype):
    g = torch.Generator().manual_seed(0)
    self_cpu = torch.rand(4, 5, generator=g).to(dtype) + 0.5
    other_cpu = torch.rand(other_shape, generator=g).to(dtype) + 0.5
    self_dev = self_cpu.to("neuron")
    result = OPS[name](self_dev, other_cpu.to("neuron"))
    OPS[name](self_cpu, other_cpu)
    assert result is self_dev
    # Same CPU kernel on the same bytes: bit-identical.
    torch.testing.assert_close(self_dev.cpu(), self_cpu, rtol=0, atol=0)


def test_cpu_scalar_operand_and_self_alias():
    x = torch.arange(6.0).reshape(2, 3)
    d = x.to("neuron")
    d.mul_(torch.tensor(3.0))  # a 0-dim CPU tensor is accepted, as on CUDA
    d.add_(d)                  # self as the other operand
    torch.testing.assert_close(d.cpu(), (x * 3) * 2, rtol=0, atol=0)


def test_errors_match_cpu():
    d = torch.ones(3, dtype=torch.int64, device="neuron")
    with pytest.raises(RuntimeError, match="can't be cast"):
        d.add_(torch.ones(3, device="neuron") * 0.5)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.ones(3, device="neuron").add_(torch.ones(2, 3, device="neuron"))
