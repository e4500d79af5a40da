"""torch.autocast("neuron"): CUDA's op lists (lower precision, fp32, promote), checked against the
same math done by hand on the CPU and against torch.autocast("cpu") where both lists agree."""

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")

DEV = "neuron"
LOW = [torch.bfloat16, torch.float16]


def tol(dtype):
    return {"rtol": 1e-2, "atol": 1e-2} if dtype in LOW else {"rtol": 1e-5, "atol": 1e-5}


def pair(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    cpu = torch.randn(*shape, generator=g, dtype=dtype)
    return cpu, cpu.to(DEV)


# --- state -----------------------------------------------------------------------------------


def test_defaults_and_state():
    assert not torch.is_autocast_enabled(DEV)
    # PyTorch's default for PrivateUse1, as for CUDA.
    assert torch.get_autocast_dtype(DEV) == torch.float16
    assert set(LOW) <= set(torch.neuron.get_amp_supported_dtype())
    with torch.autocast(DEV, dtype=torch.bfloat16):
        assert torch.is_autocast_enabled(DEV)
        assert torch.get_autocast_dtype(DEV) == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")
        with torch.autocast(DEV, enabled=False):
            assert not torch.is_autocast_enabled(DEV)
    assert not torch.is_autocast_enabled(DEV)
    assert torch.get_autocast_dtype(DEV) == torch.float16
    with torch.autocast(DEV):
        assert torch.get_autocast_dtype(DEV) == torch.float16


def test_unsupported_dtype_warns_and_disables():
    with pytest.warns(UserWarning, match="neuron"):
        with torch.autocast(DEV, dtype=torch.float64):
            assert not torch.is_autocast_enabled(DEV)


# --- lower-precision ops ---------------------------------------------------------------------


LOWER_PRECISION_CASES = {
    "mm": (lambda a, b, c: torch.mm(a, b)),
    "matmul": (lambda a, b, c: torch.matmul(a, b)),
    "linear": (lambda a, b, c: F.linear(a, b.t(), c)),
    "addmm": (lambda a, b, c: torch.addmm(c, a, b)),
    "bmm": (lambda a, b, c: torch.bmm(a.unsqueeze(0), b.unsqueeze(0))),
    "baddbmm": (lambda a, b, c: torch.baddbmm(c.expand(1, 4, 5), a.unsqueeze(0), b.unsqueeze(0))),
    "einsum": (lambda a, b, c: torch.einsum("ij,jk->ik", a, b)),
    "mv": (lambda a, b, c: torch.mv(a, b[:, 0])),
    "addmv": (lambda a, b, c: torch.addmv(c[:4] if c.dim() == 1 else c[0, :4], a, b[:, 0])),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", list(LOWER_PRECISION_CASES))
def test_lower_precision_ops(name, dtype):
    op = LOWER_PRECISION_CASES[name]
    a, an = pair(4, 8, seed=1)
    b, bn = pair(8, 5, seed=2)
    c, cn = pair(5, seed=3)
    if name == "addmv":
        c, cn = pair(4, seed=3)
    with torch.autocast(DEV, dtype=dtype):
        out = op(an, bn, cn)
    assert out.device.type == DEV and out.dtype == dtype
    expected = op(a.to(dtype), b.to(dtype), c.to(dtype))
    torch.testing.assert_close(out.cpu(), expected, **tol(dtype))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_scaled_dot_product_attention(dtype):
    q, qn = pair(2, 4, 8, 16, seed=9)
    with torch.autocast(DEV, dtype=dtype):
        out = F.scaled_dot_product_attention(qn, qn, qn, is_causal=True)
    assert out.dtype == dtype
    low = q.to(dtype)
    expected = F.scaled_dot_product_attention(low, low, low, is_causal=True)
    torch.testing.assert_close(out.cpu(), expected, rtol=2e-2, atol=2e-2)


def test_embedding_is_not_cast():
    w = torch.randn(5, 3, device=DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        assert F.embedding(torch.tensor([1, 4], device=DEV), w).dtype == torch.float32


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_module_forward_matches_cpu_autocast(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with torch.autocast("cpu", dtype=dtype):
        expected = model(x)
    model_n = model.to(DEV)
    with torch.autocast(DEV, dtype=dtype):
        out = model_n(x.to(DEV))
    assert expected.dtype == dtype and out.dtype == dtype
    torch.testing.assert_close(out.cpu(), expected, **tol(dtype))
    # The parameters themselves are untouched.
    assert all(p.dtype == torch.float32 for p in model_n.parameters())


def test_cpu_tensors_unaffected_by_neuron_autocast():
    a = torch.randn(3, 3)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        assert torch.mm(a, a).dtype == torch.float32


def test_disabled_region_keeps_float32():
    _, an = pair(4, 4)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        with torch.autocast(DEV, enabled=False):
            assert torch.mm(an, an).dtype == torch.float32
        assert torch.mm(an, an).dtype == torch.bfloat16


def test_ops_off_the_lists_keep_input_dtype():
    a, an = pair(4, 4)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        h = torch.mm(an, an)
        assert (h + h).dtype == torch.bfloat16
        assert torch.relu(h).dtype == torch.bfloat16
        assert (an * 2).dtype == torch.float32
    hc = torch.mm(a.bfloat16(), a.bfloat16())
    torch.testing.assert_close(torch.relu(h).cpu(), torch.relu(hc), rtol=0, atol=0)


# --- fp32 ops --------------------------------------------------------------------------------


# Each op gets `h`, the low-precision output of an autocast mm, and `aux`, a float32 tensor of the
# same shape (targets and the like), and must compute in float32.
FP32_CASES = {
    "softmax": lambda h, aux: torch.softmax(h, -1),
    "log_softmax": lambda h, aux: torch.log_softmax(h, -1),
    "layer_norm": lambda h, aux: F.layer_norm(h, (h.shape[-1],)),
    "group_norm": lambda h, aux: F.group_norm(h, 1),
    "exp": lambda h, aux: torch.exp(h),
    "log": lambda h, aux: torch.log(h),
    "log1p": lambda h, aux: torch.log1p(h),
    "rsqrt": lambda h, aux: torch.rsqrt(h),
    "reciprocal": lambda h, aux: torch.reciprocal(h),
    "pow": lambda h, aux: torch.pow(h, 2),
    "sum": lambda h, aux: torch.sum(h),
    "cumsum": lambda h, aux: torch.cumsum(h, 0),
    "prod": lambda h, aux: torch.prod(h, 0),
    "logsumexp": lambda h, aux: torch.logsumexp(h, 1),
    "vector_norm": lambda h, aux: torch.linalg.vector_norm(h),
    "cosine_similarity": lambda h, aux: F.cosine_similarity(h, aux),
    "mse_loss": lambda h, aux: F.mse_loss(h, aux),
    "l1_loss": lambda h, aux: F.l1_loss(h, aux),
    "smooth_l1_loss": lambda h, aux: F.smooth_l1_loss(h, aux),
    "kl_div": lambda h, aux: F.kl_div(h, aux, reduction="batchmean"),
    "nll_loss": lambda h, aux: F.nll_loss(h, torch.tensor([0, 1, 2, 3], device=h.device)),
    "bce_with_logits": lambda h, aux: F.binary_cross_entropy_with_logits(h, aux),
    "softplus": lambda h, aux: F.softplus(h),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", list(FP32_CASES))
def test_fp32_ops(name, dtype):
    op = FP32_CASES[name]
    # Positive inputs keep log/rsqrt/reciprocal finite.
    a, an = (t.abs() + 0.1 for t in pair(4, 6, seed=5))
    w, wn = (t.abs() for t in pair(6, 6, seed=6))
    aux, auxn = (torch.sigmoid(t) for t in pair(4, 6, seed=7))
    with torch.autocast(DEV, dtype=dtype):
        h = torch.mm(an, wn)
        assert h.dtype == dtype
        out = op(h, auxn)
    assert out.dtype == torch.float32, f"{name} under autocast({dtype}) gave {out.dtype}"
    # Autocast runs the op on the float32 upcast of its low-precision input.
    hc = torch.mm(a.to(dtype), w.to(dtype)).float()
    torch.testing.assert_close(out.cpu(), op(hc, aux), rtol=1e-4, atol=1e-4)


def test_fp32_set_opt_dtype_honours_explicit_dtype():
    _, an = pair(4, 4)
    with torch.autocast(DEV, dtype=torch.float16):
        h = torch.mm(an, an)
        assert torch.softmax(h, 0, dtype=torch.float64).dtype == torch.float64
        assert torch.sum(h, dtype=torch.float64).dtype == torch.float64


# --- promote ops -----------------------------------------------------------------------------


PROMOTE_CASES = {
    "addcmul": lambda lo, hi: torch.addcmul(hi, lo, lo),
    "addcdiv": lambda lo, hi: torch.addcdiv(hi, lo, lo),
    "atan2": lambda lo, hi: torch.atan2(lo, hi),
    "dot": lambda lo, hi: torch.dot(lo[0], hi[0]),
    "cross": lambda lo, hi: torch.cross(lo[:, :3], hi[:, :3], dim=1),  # aten::cross, not linalg_cross
    "tensordot": lambda lo, hi: torch.tensordot(lo, hi, dims=([1], [1])),
    "scatter_add": lambda lo, hi: hi.scatter_add(
        1, torch.zeros(lo.shape, dtype=torch.int64, device=lo.device), lo
    ),
    "index_put": lambda lo, hi: hi.index_put(
        (torch.tensor([0, 2], device=lo.device),), lo[:2]
    ),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", list(PROMOTE_CASES))
def test_promote_ops(name, dtype):
    op = PROMOTE_CASES[name]
    lo, lon = pair(4, 6, dtype=dtype, seed=7)
    hi, hin = pair(4, 6, seed=8)
    with torch.autocast(DEV, dtype=dtype):
        out = op(lon, hin)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), op(lo.float(), hi), rtol=1e-5, atol=1e-5)


def test_promote_keeps_low_precision_when_all_inputs_are_low():
    lo, lon = pair(4, 6, dtype=torch.bfloat16)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        out = torch.addcmul(lon, lon, lon)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), torch.addcmul(lo, lo, lo), rtol=0, atol=0)


# --- banned op, backward ---------------------------------------------------------------------


def test_binary_cross_entropy_is_banned():
    p = torch.sigmoid(torch.randn(4, 3, device=DEV))
    t = torch.rand(4, 3, device=DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, t)
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            torch.nn.BCELoss()(p, t)
    # Outside autocast it works and matches the CPU.
    torch.testing.assert_close(F.binary_cross_entropy(p, t).cpu(), F.binary_cross_entropy(p.cpu(), t.cpu()))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_backward_under_autocast(dtype):
    torch.manual_seed(1)
    w = torch.randn(8, 3)
    x = torch.randn(5, 8)
    target = torch.randn(5, 3)

    wc = w.clone().requires_grad_()
    loss_c = F.mse_loss(torch.mm(x.to(dtype), wc.to(dtype)).float(), target)
    loss_c.backward()

    wn = w.to(DEV).requires_grad_()
    with torch.autocast(DEV, dtype=dtype):
        out = torch.mm(x.to(DEV), wn)
        loss_n = F.mse_loss(out, target.to(DEV))
    assert out.dtype == dtype and loss_n.dtype == torch.float32
    loss_n.backward()
    assert wn.grad.dtype == torch.float32 and wn.grad.device.type == DEV
    torch.testing.assert_close(loss_n.cpu(), loss_c.detach(), **tol(dtype))
    torch.testing.assert_close(wn.grad.cpu(), wc.grad, **tol(dtype))
