"""scaled_dot_product_attention on neuron: the backend choice follows the CPU's (flash attention
where the CPU takes it, grouped-query heads included, else the math decomposition), so values
and gradients are the CPU's bit for bit, bf16 included. torch._fused_sdp_choice is neuron's own
op and names the backend SDPA runs; sdpa_kernel() restrictions hold; the fused backward computes
a float mask's gradient when the fused kernel is forced."""

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


# --- the backend choice: torch._fused_sdp_choice answers for neuron, and SDPA follows it ----------

MATH, OVERRIDEABLE = int(SDPBackend.MATH), int(SDPBackend.OVERRIDEABLE)


def choice_cases():
    """Inputs on both sides of every gate of the CPU's flash kernel."""
    g = torch.Generator().manual_seed(1)

    def t(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    q, k, v = t(2, 4, 8, 16), t(2, 4, 8, 16), t(2, 4, 8, 16)
    return {
        "plain": (q, k, v, {}),
        "causal": (q, k, v, {"is_causal": True}),
        "bf16": (q.bfloat16(), k.bfloat16(), v.bfloat16(), {}),
        "fp16": (q.half(), k.half(), v.half(), {}),
        "fp64": (q.double(), k.double(), v.double(), {}),
        "gqa": (q, t(2, 2, 8, 16), t(2, 2, 8, 16), {"enable_gqa": True}),
        "mask-4d": (q, k, v, {"attn_mask": t(2, 4, 8, 8)}),
        "mask-broadcast": (q, k, v, {"attn_mask": t(1, 1, 8, 8)}),
        "mask-2d": (q, k, v, {"attn_mask": t(8, 8)}),
        "mask-3d": (q, k, v, {"attn_mask": t(4, 8, 8)}),  # not a shape the flash kernel takes
        "mask-bool": (q, k, v, {"attn_mask": torch.rand(8, 8, generator=g) > 0.3}),
        "mask-strided": (q, k, v, {"attn_mask": t(2, 4, 8, 8).transpose(-2, -1)}),
        "dropout": (q, k, v, {"dropout_p": 0.5}),
        "3d-inputs": (q[0], k[0], v[0], {}),
        "head-dims-differ": (q, k, t(2, 4, 8, 12), {}),
        "last-dim-strided": (t(2, 4, 16, 8).transpose(-2, -1), k, v, {}),
        "empty-keys": (q, t(2, 4, 0, 16), t(2, 4, 0, 16), {}),
    }


def on_neuron(tensors, kwargs):
    moved = {k: (v.to("neuron") if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    return [x.to("neuron") for x in tensors], moved


@pytest.mark.parametrize("case", list(choice_cases()))
def test_fused_sdp_choice_is_native_and_follows_the_cpu(case):
    """Default switches: neuron takes its fused kernel exactly where the CPU takes flash
    attention, and torch._fused_sdp_choice says so without going through the CPU fallback."""
    *tensors, kwargs = choice_cases()[case]
    cpu = torch._fused_sdp_choice(*tensors, **kwargs)
    torch_neuronx.clear_op_tracking()
    got = torch._fused_sdp_choice(*on_neuron(tensors, kwargs)[0], **on_neuron(tensors, kwargs)[1])
    assert "aten::_fused_sdp_choice" not in torch_neuronx.get_fallback_ops()
    assert cpu in (MATH, int(SDPBackend.FLASH_ATTENTION))
    assert got == (OVERRIDEABLE if cpu == int(SDPBackend.FLASH_ATTENTION) else MATH), (got, cpu)


@pytest.mark.parametrize("case", ["plain", "gqa", "mask-3d", "mask-strided"])
def test_sdpa_runs_what_fused_sdp_choice_answers(case):
    *tensors, kwargs = choice_cases()[case]
    args, moved = on_neuron(tensors, kwargs)
    choice = torch._fused_sdp_choice(*args, **moved)
    torch_neuronx.clear_op_tracking()
    out = F.scaled_dot_product_attention(*args, **moved)
    assert (FUSED in torch_neuronx.get_executed_ops()) == (choice == OVERRIDEABLE)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(*tensors, **kwargs))


@pytest.mark.parametrize(
    "backends, expected",
    [([SDPBackend.MATH], MATH), ([SDPBackend.OVERRIDEABLE], OVERRIDEABLE),
     ([SDPBackend.FLASH_ATTENTION], OVERRIDEABLE), ([SDPBackend.OVERRIDEABLE, SDPBackend.MATH],
                                                    OVERRIDEABLE)],
    ids=["math", "overrideable", "flash", "overrideable+math"],
)
def test_fused_sdp_choice_honours_sdpa_kernel(backends, expected):
    q, k, v = (x.to("neuron") for x in qkv(4, 4, torch.float32))
    with sdpa_kernel(backends):
        assert torch._fused_sdp_choice(q, k, v) == expected
        torch_neuronx.clear_op_tracking()
        F.scaled_dot_product_attention(q, k, v)
        assert (FUSED in torch_neuronx.get_executed_ops()) == (expected == OVERRIDEABLE)


@pytest.mark.parametrize(
    "backends, kwargs",
    [([SDPBackend.EFFICIENT_ATTENTION], {}), ([SDPBackend.CUDNN_ATTENTION], {}),
     ([SDPBackend.OVERRIDEABLE], {"dropout_p": 0.5}), ([SDPBackend.FLASH_ATTENTION],
                                                       {"dropout_p": 0.5})],
    ids=["efficient", "cudnn", "overrideable-dropout", "flash-dropout"],
)
def test_no_enabled_backend_is_a_clear_error(backends, kwargs):
    """As on the CPU: with math disabled and the fused kernel disabled or unable to run the
    inputs, SDPA raises instead of quietly running a disabled backend."""
    q, k, v = (x.to("neuron") for x in qkv(4, 4, torch.float32))
    with sdpa_kernel(backends):
        with pytest.raises(RuntimeError, match="no enabled backend.*Allow SDPBackend.MATH"):
            torch._fused_sdp_choice(q, k, v, **kwargs)
        with pytest.raises(RuntimeError, match="no enabled backend"):
            F.scaled_dot_product_attention(q, k, v, **kwargs)


# --- the fused backward's mask gradient ---------------------------------------------------------

UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8}


def mask_grad_reference(q, k, v, mask, grad_out, scale, enable_gqa):
    """Exact (float64) mask gradient and, per element, how far a correct implementation in the
    inputs' dtype may be from it.

    dM = P (dP - D), P = softmax(S), S = scale Q K^T + M, dP = dO V^T, D = rowsum(P dP), summed
    over M's broadcast dims. Computed in precision u (float32 for bf16 inputs), with at most
    n = E + L_k + 4 roundings along any path (an E-long dot product, an L_k-long row sum, scale,
    mask add, exp, difference):
      - S and logsumexp are off by <= n u A (A = scale |Q||K|^T + |M|, and its row max for the
        logsumexp), which exp turns into a relative error of P: n u (A + rowmax A) |dP - D| P;
      - dP - D is off by <= n u T P with T = |dO||V|^T + rowsum(P |dO||V|^T);
      - summing b broadcast copies adds b u sum|dM|; rounding to the output dtype adds u_out |dM|.
    The inputs are already in their dtype when the float64 reference sees them, so input rounding
    is common to every implementation and does not count."""
    dtype = mask.dtype
    q, k, v, m, grad_out = (x.detach().double() for x in (q, k, v, mask, grad_out))
    if enable_gqa:
        k = k.repeat_interleave(q.size(1) // k.size(1), 1)
        v = v.repeat_interleave(q.size(1) // v.size(1), 1)
    s = scale if scale is not None else q.size(-1) ** -0.5
    p = (s * q @ k.transpose(-2, -1) + m).softmax(-1)
    dp = grad_out @ v.transpose(-2, -1)
    centered = dp - (p * dp).sum(-1, keepdim=True)
    exact_full = p * centered

    u = UNIT_ROUNDOFF[torch.float64 if dtype == torch.float64 else torch.float32]
    n = q.size(-1) + k.size(-2) + 4
    a = s * q.abs() @ k.abs().transpose(-2, -1) + m.abs()
    t = grad_out.abs() @ v.abs().transpose(-2, -1)
    t = t + (p * t).sum(-1, keepdim=True)
    per_score = n * u * p * ((a + a.amax(-1, keepdim=True)) * centered.abs() + t)
    exact = exact_full.sum_to_size(mask.shape)
    copies = exact_full.numel() // exact.numel()
    bound = (per_score.sum_to_size(mask.shape)
             + copies * u * exact_full.abs().sum_to_size(mask.shape)
             + UNIT_ROUNDOFF[dtype] * exact.abs())
    return exact, bound


def assert_within(actual, exact, bound, what):
    err = (actual.double() - exact).abs()
    assert (err <= bound).all(), (
        f"{what}: {int((err > bound).sum())} of {err.numel()} mask-gradient elements beyond the "
        f"rounding bound; worst excess {(err - bound).max().item():.3g}"
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "heads, mask_shape, kwargs",
    [((4, 4), (2, 4, 8, 8), {}), ((4, 4), (1, 1, 8, 8), {}), ((4, 4), (8, 8), {}),
     ((4, 2), (2, 1, 8, 8), {"enable_gqa": True}), ((4, 4), (2, 4, 8, 8), {"scale": 0.3})],
    ids=["full", "broadcast", "2d", "gqa", "scale"],
)
def test_fused_backward_computes_the_mask_gradient(dtype, heads, mask_shape, kwargs):
    """With the fused kernel forced (math disabled), a float mask that requires grad gets its
    gradient from the fused backward: within rounding of the exact gradient, as the CPU's (math)
    is; the other gradients and the output are the fused kernel's as without a mask gradient."""
    q, k, v = qkv(*heads, dtype)
    g = torch.Generator().manual_seed(7)
    mask = torch.randn(*mask_shape, generator=g).to(dtype)
    grad_out = torch.randn(2, heads[0], 8, 16, generator=g).to(dtype)

    def run(device, mask_requires_grad, backends):
        leaves = [x.to(device).requires_grad_() for x in (q, k, v)]
        m = mask.to(device).requires_grad_(mask_requires_grad)
        with sdpa_kernel(backends):
            out = F.scaled_dot_product_attention(*leaves, attn_mask=m, **kwargs)
        out.backward(grad_out.to(device))
        grads = [x.grad.cpu() for x in leaves]
        return out.detach().cpu(), grads, (m.grad.cpu() if mask_requires_grad else None)

    torch_neuronx.clear_op_tracking()
    out, grads, mask_grad = run("neuron", True, [SDPBackend.OVERRIDEABLE])
    assert FUSED + "_backward" in torch_neuronx.get_executed_ops()
    assert mask_grad.dtype == dtype and mask_grad.shape == mask.shape
    ref_out, ref_grads, _ = run("neuron", False, [SDPBackend.OVERRIDEABLE])
    assert torch.equal(out, ref_out)
    for got, want in zip(grads, ref_grads):
        assert torch.equal(got, want)

    _, _, cpu_mask_grad = run("cpu", True, [SDPBackend.MATH])
    exact, bound = mask_grad_reference(q, k, v, mask, grad_out, kwargs.get("scale"),
                                       kwargs.get("enable_gqa", False))
    assert_within(cpu_mask_grad, exact, bound, "CPU (premise of the bound)")
    assert_within(mask_grad, exact, bound, "neuron")
    # The bound is tight enough to fail on a real bug (a wrong scale, a missed broadcast sum).
    assert bound.max() < 0.01 * exact.abs().max()
