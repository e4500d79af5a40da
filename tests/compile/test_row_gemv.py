"""One-row matrix products in compiled programs (neuron_program.row_gemv,
csrc/backend/compiler/ProgramGemv.cpp): a linear layer applied to one token is rewritten to the
kernel that splits the weight's rows over the cores, and computes what mm computes.

Tolerance, from the arithmetic: each output is a float32 sum of K products, accumulated in an
order of the kernel's choosing; against a float64 reference its error is at most about
K * eps/2 * sum|x_k * w_nk| (the standard bound for recursive summation), which bounds every
element below."""

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import torch_neuronx  # noqa: F401

U = torch.finfo(torch.float32).eps / 2
row_gemv = torch.ops.neuron_program.row_gemv.default


def assert_within_summation_bound(actual, x, weight_t):
    exact = x.double() @ weight_t.double()
    bound = weight_t.size(0) * U * (x.double().abs() @ weight_t.double().abs()) + 1e-30
    err = (actual.double().cpu() - exact.cpu()).abs()
    assert actual.dtype == torch.float32 and actual.shape == exact.shape
    assert (err <= bound.cpu()).all(), f"max error / bound {(err / bound.cpu()).max().item():.3g}"


@pytest.mark.parametrize("k", [1, 15, 16, 17, 256, 688])
@pytest.mark.parametrize("n", [1, 3, 1024])
@pytest.mark.parametrize("threads", [1, 2])
def test_row_gemv_matches_the_product_within_the_summation_bound(k, n, threads):
    g = torch.Generator().manual_seed(k * 1000 + n)
    x = torch.randn(1, k, generator=g)
    weight = torch.randn(n, k, generator=g)  # a linear layer's weight: row-major (N, K)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = row_gemv(x, weight.t())
    finally:
        torch.set_num_threads(previous)
    assert out.is_contiguous()
    assert_within_summation_bound(out, x, weight.t())


def test_row_gemv_takes_a_strided_row_and_other_layouts_fall_back_to_mm():
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(40, 24, generator=g)
    x = torch.randn(2, 24, generator=g)[:1, :]  # a row of a larger matrix
    strided_x = torch.randn(1, 48, generator=g)[:, ::2]  # stride 2 along K
    assert_within_summation_bound(row_gemv(x, weight.t()), x, weight.t())
    assert_within_summation_bound(row_gemv(strided_x, weight.t()), strided_x, weight.t())
    # Not the one-row, transposed-weight float32 case: ATen's mm computes it.
    w = torch.randn(24, 40, generator=g)  # already (K, N) row-major: stride(0) != 1
    assert torch.equal(row_gemv(x, w), torch.mm(x, w))
    two = torch.randn(2, 24, generator=g)
    assert torch.equal(row_gemv(two, weight.t()), torch.mm(two, weight.t()))
    xb, wb = x.bfloat16(), weight.bfloat16()
    assert torch.equal(row_gemv(xb, wb.t()), torch.mm(xb, wb.t()))
    with pytest.raises(RuntimeError, match=r"expected \(M, K\) @ \(K, N\)"):
        row_gemv(x, torch.randn(23, 40))


@pytest.mark.parametrize("rows", [1, 2])
def test_compiled_linear_on_one_token_uses_row_gemv(rows, monkeypatch):
    # The program's code is generated, not loaded from a cache, so that it can be read.
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
    torch.manual_seed(0)
    layer = torch.nn.Linear(96, 200, bias=False).to("neuron")
    compiled = torch.compile(layer, backend="neuron", dynamic=False)
    x = torch.randn(rows, 96).to("neuron")
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        _, code = run_and_get_code(compiled, x)
        out = compiled(x)
    weight = layer.weight.detach().cpu()
    assert out.device.type == "neuron"
    assert_within_summation_bound(out, x.cpu(), weight.t())
    assert ("neuron_program.row_gemv" in "".join(code)) == (rows == 1), code


def test_row_gemv_in_a_single_threaded_program_restores_the_thread_count():
    """A decode-sized program runs on one intra-op thread (SingleThreaded.h); its row products
    take the put-aside threads back for their own call, and the count is 2 again after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        layer = torch.nn.Linear(64, 64, bias=False).to("neuron")
        compiled = torch.compile(layer, backend="neuron", dynamic=False)
        x = torch.randn(1, 64).to("neuron")
        with torch.no_grad():
            out = compiled(x)
        assert torch.get_num_threads() == 2
        assert_within_summation_bound(out, x.cpu(), layer.weight.detach().cpu().t())
    finally:
        torch.set_num_threads(previous)
