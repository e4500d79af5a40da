"""The reference kernels of examples/nki against torch at small sizes, on neuron tensors, with
tolerances derived from their dtypes and accumulation orders; plus what their modelled timing
must satisfy."""

import os
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "nki"))
from flash_attention import flash_attention_fwd  # noqa: E402
from matmul import matmul_kernel  # noqa: E402
from rmsnorm import rmsnorm_kernel  # noqa: E402
from softmax import softmax_kernel  # noqa: E402

U32 = 2.0**-24  # float32 unit roundoff
UBF16 = 2.0**-8  # bfloat16 unit roundoff


def test_matmul_example_and_its_mfu():
    torch.manual_seed(0)
    a = torch.randn(256, 256, dtype=torch.bfloat16)
    b = torch.randn(256, 1024, dtype=torch.bfloat16)
    out = matmul_kernel(a.t().contiguous().to("neuron"), b.to("neuron")).cpu()
    ref = a.double() @ b.double()
    # bf16 products are exact in FP32; K sums in some order: |error| <= (K + 1) u sum|a||b|.
    assert torch.all((out.double() - ref).abs() <= 257 * U32 * (a.double().abs() @ b.double().abs()))
    run = matmul_kernel.last_run
    assert run.matmul_flops == 2 * 256 * 256 * 1024
    model = torch_neuronx.core_model()
    # MFU is against one physical core's BF16 peak (a logical core adds up lnc of them).
    assert run.peak_flops_per_ns == pytest.approx(model["tensor_flops_per_ns"]["bf16"] / model["lnc"])
    assert run.mfu == pytest.approx(run.matmul_flops / run.makespan_ns / run.peak_flops_per_ns)
    assert 0 < run.mfu <= 1


def test_softmax_example():
    torch.manual_seed(1)
    x = torch.randn(256, 300, dtype=torch.bfloat16)
    out = softmax_kernel(x.to("neuron")).cpu()
    ref = torch.softmax(x.double(), dim=1)
    # FP32 pipeline ((C + 6) u) then one bf16 rounding.
    assert torch.all((out.double() - ref).abs() <= (UBF16 + 306 * U32) * ref)


def test_rmsnorm_example():
    torch.manual_seed(2)
    x = torch.randn(256, 64, dtype=torch.bfloat16)
    w = torch.randn(64, dtype=torch.bfloat16)
    out = rmsnorm_kernel(x.to("neuron"), w.to("neuron")).cpu()
    ref = F.rms_norm(x.double(), (64,), w.double(), eps=1e-6)
    assert torch.all((out.double() - ref).abs() <= (UBF16 + 72 * U32) * ref.abs())


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_forward_example(causal):
    torch.manual_seed(3)
    seq, d = 512, 64
    q, k, v = (torch.randn(seq, d, dtype=torch.bfloat16) for _ in range(3))
    out = flash_attention_fwd(q.to("neuron"), k.to("neuron"), v.to("neuron"), causal).cpu()
    qd, kd, vd = q.double(), k.double(), v.double()
    scores = qd @ kd.T / d**0.5
    if causal:
        scores = scores.masked_fill(torch.ones(seq, seq).triu(1).bool(), float("-inf"))
    weights = torch.softmax(scores, dim=1)
    ref = weights @ vd
    # P is stored as bf16 before P @ V while the row sums use the FP32 values: each weight is off
    # by at most u_bf16; the output is rounded to bf16 once more; FP32 sums of S terms on top.
    bound = (2 * UBF16 + 4 * seq * U32) * (weights @ vd.abs())
    assert torch.all((out.double() - ref).abs() <= bound)
    run = flash_attention_fwd.last_run
    # Per 128-query tile, each 512-key tile it sees costs QK^T and PV: 2 x (2 x 128 x 512 x d).
    key_tiles = [((i + 1) * 128 + 511) // 512 if causal else seq // 512 for i in range(seq // 128)]
    assert run.matmul_flops == sum(key_tiles) * 2 * (2 * 128 * 512 * d)
    assert set(run.utilization) == {"tensor", "vector", "scalar", "gpsimd", "dma"}


def test_flash_attention_backward_example():
    from flash_attention import flash_attention_bwd

    torch.manual_seed(4)
    seq, d = 512, 64
    q, k, v, d_o = (torch.randn(seq, d, dtype=torch.bfloat16) for _ in range(4))
    o = flash_attention_fwd(q, k, v)
    dq, dk, dv = flash_attention_bwd(*(t.to("neuron") for t in (q, k, v, o, d_o)))
    qd, kd, vd, od, dod = (t.double() for t in (q, k, v, o, d_o))
    scale = d**-0.5
    p = torch.softmax(qd @ kd.T * scale, dim=1)
    dp = dod @ vd.T
    delta = (dod * od).sum(1, keepdim=True)
    ds = p * (dp - delta) * scale
    # Exact gradients for the kernel's own o (the forward's bf16 output feeds delta).
    ref_dq, ref_dk, ref_dv = ds @ kd, ds.T @ qd, p.T @ dod
    # P and dS are rounded to bf16 before their matmuls (u_bf16 relative each); dP and delta are
    # FP32 sums of D terms; the gradient matmuls are FP32 sums of S terms.
    err_ds = UBF16 * ds.abs() + scale * p * (2 * d * U32 * (dod.abs() @ vd.abs().T + (
        dod * od).abs().sum(1, keepdim=True)) + 4 * U32 * (dp - delta).abs())
    sums = (seq + 1) * U32
    assert torch.all((dv.cpu().double() - ref_dv).abs() <= (UBF16 + sums) * (p.T @ dod.abs()))
    assert torch.all((dk.cpu().double() - ref_dk).abs() <= err_ds.T @ qd.abs() + sums * (
        ds.abs().T @ qd.abs()))
    assert torch.all((dq.cpu().double() - ref_dq).abs() <= err_ds @ kd.abs() + sums * (
        ds.abs() @ kd.abs()))
    run = flash_attention_bwd.last_run
    # Per 128-query tile: pass 1 QK^T over all keys; pass 2 per 128 keys QK^T, P^T dO, dO V^T,
    # dS^T Q, dS K: five 128 x 128 x d matmuls.
    tiles = seq // 128
    assert run.matmul_flops == tiles * (2 * 128 * d * seq + tiles * 5 * 2 * 128 * 128 * d)
