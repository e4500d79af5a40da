"""What the layout fuzzer found, one readable case each (docs/fuzzing.md lists them); each test
holds its fix. A finding whose fix is under way elsewhere is a strict xfail naming where (with an
entry in known.py), so the fix turns it into a failure that asks for both to go."""

from __future__ import annotations

import pytest
import torch

import torch_neuronx

from . import known


def _same(neuron: torch.Tensor, cpu: torch.Tensor) -> None:
    assert neuron.device.type == "neuron"
    assert neuron.dtype == cpu.dtype and neuron.shape == cpu.shape
    assert neuron.stride() == cpu.stride()
    torch.testing.assert_close(neuron.cpu(), cpu, rtol=0, atol=0, equal_nan=True)


def test_fallback_out_resized_takes_the_cpu_results_layout():
    """An out= of the wrong size is resized by the op; on the CPU it takes the memory order of
    the inputs (a transposed input gives a transposed out=). The CPU fallback brought results
    back through _copy_from_and_resize, which resized out= contiguous: strides (5, 1) where the
    CPU's are (1, 5). (Fuzzer: logaddexp2 (out), input float32[5, 5] stride (1, 5), out= 6x6.)"""
    x, y = torch.randn(5, 5).t(), torch.randn(5, 5)
    out = torch.full((6, 6), 7.0)
    with pytest.warns(UserWarning, match="was resized"):
        torch.logaddexp2(x, y, out=out)
    torch_neuronx.clear_op_tracking()
    neuron_out = torch.full((6, 6), 7.0, device="neuron")
    with pytest.warns(UserWarning, match="was resized"):
        torch.logaddexp2(x.to("neuron"), y.to("neuron"), out=neuron_out)
    assert "aten::logaddexp2.out" in torch_neuronx.get_fallback_ops()  # the path under test
    _same(neuron_out, out)


def test_fallback_out_resized_from_empty_takes_the_cpu_results_layout():
    x = torch.randn(2, 3, 4).permute(2, 0, 1)
    out, neuron_out = torch.empty(0), torch.empty(0, device="neuron")
    torch.logaddexp2(x, x, out=out)
    torch.logaddexp2(x.to("neuron"), x.to("neuron"), out=neuron_out)
    _same(neuron_out, out)


def test_inplace_op_that_calls_its_out_form_on_self_accepts_an_expanded_self():
    """nan_to_num_ runs nan_to_num.out(self, out=self); on an integer tensor that is
    result.copy_(self), a no-op on the CPU (one tensor). The host-math kernel gave the CPU kernel
    two host views of self, and copy_ refused their overlap: "more than one element of the
    written-to tensor refers to a single memory location". (Fuzzer: nan_to_num (inplace), self
    int64[2] stride (0,).)"""
    x = torch.tensor([3]).expand(2)
    expected = torch.nan_to_num_(x)
    neuron = torch.tensor([3], device="neuron").expand(2)
    result = torch.nan_to_num_(neuron)
    assert result is neuron
    _same(result, expected)


def test_addr_inplace_refuses_a_self_it_would_have_to_broadcast():
    """addr_ may not broadcast self (the CPU: "2D tensor expected, got 0D tensor for input");
    neuron resized a 0-d self to the outer product's shape instead. (Fuzzer: addr (inplace),
    self float32[], vec1 float32[5], vec2 float32[10].)"""
    for device in ("cpu", "neuron"):
        self_ = torch.tensor(1.5, device=device)
        with pytest.raises(RuntimeError, match="2D tensor expected, got 0D tensor"):
            self_.addr_(torch.ones(5, device=device), torch.ones(10, device=device))
        assert self_.shape == ()
    # ... and a 2-D self is updated in place, as on the CPU.
    a, b = torch.randn(5), torch.randn(10)
    expected = torch.randn(5, 10)
    neuron = expected.to("neuron")
    expected.addr_(a, b, beta=0.5, alpha=2)
    assert neuron.addr_(a.to("neuron"), b.to("neuron"), beta=0.5, alpha=2) is neuron
    _same(neuron, expected)


def test_max_pool1d_strides_follow_the_non_cpu_path():
    """Not a neuron bug: at::max_pool1d has a CPU-only kernel (max_pool1d_impl) for inputs that
    need no grad, and every other device runs max_pool1d_with_indices, which keeps a permuted
    input's memory order. Neuron's result equals that path's run on the CPU, strides included
    (the fuzzer compares this op's values, not its strides: known.DEVICE_PATH_STRIDES)."""
    assert "nn.functional.max_pool1d" in known.DEVICE_PATH_STRIDES
    x = torch.randn(1, 3, 2).permute(0, 2, 1)  # float32[1, 2, 3] stride (6, 1, 2)
    kwargs = dict(kernel_size=3, stride=2, ceil_mode=True, padding=1)
    with_indices, _ = torch.nn.functional.max_pool1d(x, return_indices=True, **kwargs)
    neuron = torch.nn.functional.max_pool1d(x.to("neuron"), **kwargs)
    _same(neuron, with_indices)


# ---------------------------------------------------------------------------------------------
# Found here as well, fixed at their root by the i27-core work (issue 27 items 1 and 2)


def test_add_of_two_channels_last_operands():
    x = torch.randn(1, 3, 2, 2).contiguous(memory_format=torch.channels_last)
    y = x.clone()
    _same(x.to("neuron") + y.to("neuron"), x + y)


def test_out_partly_overlapping_an_input_is_refused():
    """Fuzzer: logaddexp2/add (out), out= a view one element further into the input's storage."""
    for device in ("cpu", "neuron"):
        storage = torch.arange(26.0, device=device)
        with pytest.raises(RuntimeError, match="unsupported operation"):
            torch.add(storage[:25].view(5, 5), 1.0, out=storage[1:].view(5, 5))


def test_inplace_with_an_operand_partly_overlapping_self_is_refused():
    for device in ("cpu", "neuron"):
        x = torch.arange(20.0, device=device)
        with pytest.raises(RuntimeError, match="unsupported operation"):
            x[5:15].add_(x[0:10])


def test_max_unpool2d_backward_with_channels_last_indices():
    """Fuzzer: nn.functional.max_unpool2d (backward), input float32[1, 2, 1, 2], indices
    int64[1, 2, 1, 2] channels_last; its backward asks for a channels-last tensor."""
    x = torch.randn(1, 2, 1, 2)
    indices = torch.tensor([[[[0, 4]], [[7, 10]]]]).contiguous(memory_format=torch.channels_last)
    grads = []
    for device in ("cpu", "neuron"):
        leaf = x.to(device).requires_grad_(True)
        out = torch.nn.functional.max_unpool2d(leaf, indices.to(device), kernel_size=3, stride=2,
                                               output_size=(3, 6))
        grads.append(torch.autograd.grad(out, leaf, torch.ones_like(out))[0])
    _same(grads[1], grads[0])


def test_mode_out_runs_on_neuron():
    """Fuzzer: mode (out), a 0-d float32 input, out=(0-d float32, 0-d int64)."""
    x = torch.tensor(2.5)
    values, indices = torch.empty(()), torch.empty((), dtype=torch.long)
    torch.mode(x, out=(values, indices))
    neuron = (torch.empty((), device="neuron"), torch.empty((), dtype=torch.long, device="neuron"))
    torch.mode(x.to("neuron"), out=neuron)
    _same(neuron[0], values)
    _same(neuron[1], indices)


def test_ldexp_inplace_refuses_a_self_it_would_have_to_broadcast():
    """ldexp_ runs mul.out(self, 2**other, out=self). The unboxed add/sub/mul/div .out kernels
    gave self and out= two host views, so the CPU's TensorIterator saw no read-write output and
    resized self to the broadcast shape where the CPU refuses; one host view per tensor
    (CallHostViews) fixes it. (Fuzzer, long run seed 3115436528: ldexp (inplace), self
    float32[], other float32[1].)"""
    for device in ("cpu", "neuron"):
        other = torch.tensor([2.0], device=device)
        for call in (lambda s: s.ldexp_(other), lambda s: torch.mul(s, other, out=s),
                     lambda s: torch.add(s, other, alpha=2, out=s),
                     lambda s: torch.sub(s, other, out=s), lambda s: torch.div(s, other, out=s)):
            self_ = torch.tensor(1.5, device=device)
            with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
                call(self_)
            assert self_.shape == ()
    # ... and an out= that is self with the broadcast shape is updated in place, as on the CPU.
    x, y = torch.randn(3, 4).t(), torch.randn(4, 1)
    neuron = x.to("neuron")
    expected = torch.mul(x, y, out=x)
    result = torch.mul(neuron, y.to("neuron"), out=neuron)
    assert result is neuron
    _same(neuron, expected)
