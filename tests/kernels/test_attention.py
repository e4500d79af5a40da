"""scaled_dot_product_attention on neuron: the backend choice follows the CPU's (flash attention
where the CPU takes it, grouped-query heads included, else the math decomposition), so values
and gradients are the CPU's bit for bit, bf16 included."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_neuronx

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"


def qkv(q_heads, kv_heads, dtype, seq=8, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, q_heads, seq, dim, generator=g).to(dtype)
    k = torch.randn(2, kv_heads, seq, dim, generator=g).to(dtype)
    v = torch.randn(2, kv_heads, seq, dim, generator=g).to(dtype)
    return q, k, v


def run(tensors, device, **kwargs):
    leaves = [t.to(device).requires_grad_() for t in tensors]
    out = F.scaled_dot_product_attention(*leaves, **kwargs)
    grad = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.dtype)
    out.backward(grad.to(device))
    return [out.detach().cpu()] + [t.grad.cpu() for t in leaves]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "heads, kwargs",
    [((4, 4), {}), ((4, 4), {"is_causal": True}), ((4, 2), {"is_causal": True, "enable_gqa": True}),
     ((4, 1), {"enable_gqa": True, "scale": 0.3})],
    ids=["plain", "causal", "gqa", "mqa-scale"],
)
def test_fused_attention_is_cpu_exact(dtype, heads, kwargs):
    tensors = qkv(*heads, dtype)
    torch_neuronx.clear_op_tracking()
    got = run(tensors, "neuron", **kwargs)
    assert FUSED in torch_neuronx.get_executed_ops()
    expected = run(tensors, "cpu", **kwargs)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert torch.equal(g, e), (g - e).abs().max()


def test_mask_needing_grad_takes_math_backend():
    q, k, v = qkv(2, 2, torch.float32)
    mask = torch.randn(2, 2, 8, 8)
    neuron_mask = mask.to("neuron").requires_grad_()
    torch_neuronx.clear_op_tracking()
    out = F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), attn_mask=neuron_mask)
    out.sum().backward()
    assert FUSED not in torch_neuronx.get_executed_ops()
    cpu_mask = mask.clone().requires_grad_()
    F.scaled_dot_product_attention(q, k, v, attn_mask=cpu_mask).sum().backward()
    torch.testing.assert_close(neuron_mask.grad.cpu(), cpu_mask.grad)


def test_sdpa_kernel_math_is_respected():
    tensors = qkv(4, 4, torch.bfloat16)
    torch_neuronx.clear_op_tracking()
    with sdpa_kernel(SDPBackend.MATH):
        got = run(tensors, "neuron", is_causal=True)
        expected = run(tensors, "cpu", is_causal=True)
    assert FUSED not in torch_neuronx.get_executed_ops()
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
