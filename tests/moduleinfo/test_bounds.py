"""The ModuleInfo suite's error bounds and comparison, on known answers: the bound a CPU run gives
each result follows the documented formula, and a neuron result off by more than it fails."""

import copy

import pytest
import torch

from error_bounds import U_ACC, ErrorBounds

from .test_moduleinfo import (
    Mismatch,
    _compare,
    _compare_tensor,
    _Margin,
)

U32, U16 = 2.0**-24, 2.0**-8


@pytest.fixture(autouse=True)
def _keep_the_margins():
    """These tests compare made-up results: keep them out of the suite's reported margins."""
    saved, sample = dict(_Margin.largest), _Margin.sample
    yield
    _Margin.largest.clear()
    _Margin.largest.update(saved)
    _Margin.sample = sample


def _op(unit: float, length: int) -> float:
    """One op's contribution: its rounding plus a K-term float32 sum, for two devices."""
    return 2 * (unit + length * U_ACC)


@pytest.mark.parametrize("dtype,unit", [(torch.float32, U32), (torch.bfloat16, U16)])
def test_bounds_follow_the_chain(dtype, unit):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(10, 8), torch.nn.ReLU()).to(dtype)
    x = torch.randn(3, 10, dtype=dtype, requires_grad=True)
    cotangent = torch.randn(3, 8, dtype=dtype)
    bounds = ErrorBounds()
    with bounds:
        y = module(x)
        grad_x, grad_w, grad_b = torch.autograd.grad(
            y, [x, module[0].weight, module[0].bias], cotangent
        )
    addmm = _op(unit, 10)  # contracted over in_features
    relu = addmm + _op(unit, 1)
    assert bounds.of(y) == pytest.approx(relu)
    # The gradients start from threshold_backward (pointwise, on the relu output and cotangent).
    assert bounds.of(grad_x) == pytest.approx(relu + _op(unit, 1) + _op(unit, 8))  # mm over out
    assert bounds.of(grad_w) == pytest.approx(relu + _op(unit, 1) + _op(unit, 3))  # mm over batch
    assert bounds.of(grad_b) == pytest.approx(relu + _op(unit, 1) + _op(unit, 3))  # sum over batch
    assert not bounds.seeded


def test_dropout_in_eval_draws_nothing_and_in_training_does():
    bounds = ErrorBounds()
    with bounds:
        torch.nn.functional.dropout(torch.ones(4), 0.5, training=False)
    assert not bounds.seeded
    with bounds:
        torch.nn.functional.dropout(torch.ones(4), 0.5, training=True)
    assert bounds.seeded


def test_a_wrong_kernel_fails():
    """A neuron Linear whose weight is off by one part in 10^4 fails against the derived bound
    (about 22 float32 ulps here); the unchanged copy passes."""
    torch.manual_seed(0)
    cpu = torch.nn.Linear(10, 8)
    x = torch.randn(3, 10)
    bounds = ErrorBounds()
    with bounds:
        traced = copy.deepcopy(cpu)(x)
    expected = cpu(x)
    good = copy.deepcopy(cpu).to("neuron")
    _compare(good(x.to("neuron")), expected, [bounds.of(traced)], "output", values=True)
    bad = copy.deepcopy(cpu).to("neuron")
    with torch.no_grad():
        bad.weight.mul_(1 + 1e-4)
    with pytest.raises(Mismatch, match="allowed"):
        _compare(bad(x.to("neuron")), expected, [bounds.of(traced)], "output", values=True)


def test_comparison_edges():
    e = torch.tensor([1.0, -2.0, float("nan"), float("inf")])
    bound = 1e-3
    ok = (e * (1 + 0.5 * bound)).to("neuron")
    _compare_tensor(ok, e, bound, "t", values=True)
    with pytest.raises(Mismatch, match="allowed"):
        _compare_tensor(
            (e + torch.tensor([0.0, 3 * bound * 2, 0, 0])).to("neuron"), e, bound, "t", values=True
        )
    with pytest.raises(Mismatch, match="NaN/inf"):
        _compare_tensor(
            torch.tensor([1.0, -2.0, 0.0, float("inf")], device="neuron"),
            e,
            bound,
            "t",
            values=True,
        )
    with pytest.raises(Mismatch, match="on cpu"):
        _compare_tensor(e.clone(), e, bound, "t", values=True)
    with pytest.raises(Mismatch, match="elements differ"):
        _compare_tensor(
            torch.tensor([1, 3], device="neuron"), torch.tensor([1, 2]), bound, "t", values=True
        )
