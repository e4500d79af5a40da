"""The layouts the estimate's trace gives neuron kernels' outputs (torch_neuronx/_op_work.py,
in_kernel_layouts) are the layouts eager's kernels return: on meta tensors laid out as eager's
inputs, every data output's shape, strides and dtype match eager's. Each case where torch's own meta
function lays an output out otherwise says so (`meta_differs`), so the override is not idle."""

import pytest
import torch

import torch_neuronx  # noqa: F401
from torch_neuronx import _op_work

FORWARD = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
BACKWARD = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward.default
B, L, D = 2, 8, 16


def tensor(shape, dtype, heads_major=True):
    """On neuron: contiguous (B, heads, L, D), or (B, L, heads, D)-major and transposed."""
    torch.manual_seed(len(shape))
    if heads_major:
        return torch.randn(shape, dtype=dtype).to("neuron")
    b, h, l, d = shape
    return torch.randn(b, l, h, d, dtype=dtype).to("neuron").transpose(1, 2)


def on_meta(x):
    if not isinstance(x, torch.Tensor):
        return x
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")


def layouts(outputs, count):
    """The first `count` outputs' layouts: the data (the forward's others -- lengths, an
    unused random seed and offset -- are no data of the kernel's)."""
    return [None if t is None or t.numel() == 0 else (tuple(t.shape), t.stride(), t.dtype)
            for t in outputs[:count]]


def check(func, args, count, meta_differs):
    eager = layouts(func(*args), count)
    meta_args = [on_meta(a) if not isinstance(a, list) else a for a in args]
    traced = layouts(_op_work.in_kernel_layouts(func)(*meta_args), count)
    assert traced == eager, (func, traced, eager)
    torch_meta = layouts(func(*meta_args), count)
    assert (torch_meta != eager) == meta_differs, (func, torch_meta, eager)


CASES = {
    # name: (query heads, key/value heads, heads-major inputs, float mask, dtype)
    "contiguous, causal": (2, 2, True, False, torch.float32),
    "(B, L, heads, D)-major": (2, 2, False, False, torch.float32),
    "grouped-query heads": (4, 2, True, False, torch.float32),
    "float mask and its gradient, bf16": (2, 2, True, True, torch.bfloat16),
}


@pytest.mark.parametrize("case", CASES)
def test_fused_attention_layouts(case):
    hq, hkv, heads_major, with_mask, dtype = CASES[case]
    q = tensor((B, hq, L, D), dtype, heads_major)
    k = tensor((B, hkv, L, D), dtype, heads_major)
    v = tensor((B, hkv, L, D), dtype, heads_major)
    mask = tensor((B, 1, L, L), dtype) if with_mask else None
    causal = not with_mask
    # The forward: its logsumexp is (B, L, heads)-major in eager, contiguous in torch's meta.
    check(FORWARD, [q, k, v, mask, 0.0, causal, False], 2, meta_differs=True)
    out, lse, *_ = FORWARD(q, k, v, mask, 0.0, causal, False)
    grad_out = tensor((B, hq, L, D), dtype)
    bias = mask if with_mask else torch.empty(0, dtype=dtype, device="neuron")
    args = [grad_out, q, k, v, bias, [True, True, True, with_mask], out, lse, None, None, L, L,
            0.0, causal, torch.empty(0), torch.empty(0)]
    # The backward: each gradient (B, L, heads, D)-major in eager; torch's meta lays each out as
    # its input, the same only for (B, L, heads, D)-major inputs.
    check(BACKWARD, args, 4, meta_differs=heads_major)
