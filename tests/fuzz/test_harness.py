"""The fuzzer's own parts on known answers: layouts give the strides they name and keep values,
the copy to neuron keeps storage sharing, and check() fails on each kind of difference it is
there to catch (a fuzzer that cannot fail finds nothing)."""

from __future__ import annotations

import pytest
import torch

from parity import Mismatch, StorageCopier

from .calls import Call
from .check import backward, check
from .layouts import Layout, contiguous


def _call(fn, *tensors, **kwargs) -> Call:
    return Call(op=None, form="functional", fn=fn, input=tensors[0], args=tensors[1:],
                kwargs=kwargs)


def test_layouts_keep_values_and_give_the_named_strides():
    x = torch.arange(24.0).view(1, 2, 3, 4)
    layout = Layout((0, 2, 3, 1), (1,) * 4, (0,) * 4)
    assert layout.name == "channels_last"
    channels_last = layout.apply(x)
    assert channels_last.is_contiguous(memory_format=torch.channels_last)
    strided = Layout((0, 1, 2, 3), (1, 2, 1, 3), (0, 1, 0, 2), storage_offset=5).apply(x)
    # buffer sizes (1, 2*2+1, 3, 4*3+2) = (1, 5, 3, 14): strides (210, 42, 14, 1), stepped
    assert strided.stride() == (210, 84, 14, 3)
    assert strided.storage_offset() == 5 + 1 * 42 + 2 * 1
    expanded = Layout((0, 1, 2, 3), (1,) * 4, (0,) * 4, expanded=(2,)).apply(x)
    assert expanded.stride()[2] == 0
    for t in (channels_last, strided):
        assert torch.equal(t, x)
    assert torch.equal(expanded, x[:, :, :1].expand(1, 2, 3, 4))
    assert contiguous(3).apply(torch.ones(2, 0, 3)).shape == (2, 0, 3)  # zero-size


def test_check_passes_a_correct_op_and_keeps_aliasing():
    x = Layout((1, 0), (2, 1), (1, 0), storage_offset=3).apply(torch.randn(3, 4))
    assert check(_call(torch.add, x, x))[0] == "compared"


def test_check_catches_wrong_values():
    x = torch.randn(4, 4)

    def off_by_one_ulp_on_neuron(t):
        result = t * 2
        return result.nextafter(torch.full_like(result, 9.0)) if t.device.type == "neuron" else result

    # one float32 ulp is within the bound of a multiplication (2 * 2^-24 relative)
    check(_call(off_by_one_ulp_on_neuron, x))

    def off_on_neuron(t):
        return t * 2 + (1e-3 if t.device.type == "neuron" else 0.0)

    with pytest.raises(Mismatch, match="allowed"):
        check(_call(off_on_neuron, x))


def test_check_catches_wrong_strides():
    x = torch.randn(4, 5).t()

    def contiguous_on_neuron(t):
        return t.contiguous() if t.device.type == "neuron" else t.clone()

    with pytest.raises(Mismatch, match="strides"):
        check(_call(contiguous_on_neuron, x))


def test_check_catches_a_missing_error_and_a_missing_resize_warning():
    x = torch.randn(3)

    def refuses_on_cpu(t):
        if t.device.type == "cpu":
            raise RuntimeError("unsupported operation")
        return t

    with pytest.raises(Mismatch, match="CPU raised"):
        check(_call(refuses_on_cpu, x))

    def resizes_silently_on_neuron(t, out):
        if t.device.type == "neuron":
            out.resize_(0)
        return torch.neg(t, out=out)

    with pytest.raises(Mismatch, match="resized"):
        check(_call(resizes_silently_on_neuron, x, out=torch.empty(5)))


def test_check_catches_a_write_the_cpu_does_not_make():
    x = torch.randn(3)

    def writes_input_on_neuron(t):
        result = t + 1
        if t.device.type == "neuron":
            t.zero_()
        return result

    with pytest.raises(Mismatch, match="arguments after the call"):
        check(_call(writes_input_on_neuron, x))


def test_copies_share_storage_where_the_cpu_tensors_do_and_only_there():
    base = torch.arange(10.0)
    copier = StorageCopier("neuron")
    a, b = copier.tensor(base[:6]), copier.tensor(base[4:])
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert (a.storage_offset(), b.storage_offset()) == (0, 4)
    # Empty storages all have data pointer 0: they must not become one storage.
    e1, e2 = copier.tensor(torch.empty(0)), copier.tensor(torch.empty(0))
    assert e1.untyped_storage()._cdata != e2.untyped_storage()._cdata


class _GradientOffOnNeuron(torch.autograd.Function):
    """The identity, whose gradient is wrong on neuron only."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * (1.01 if grad.device.type == "neuron" else 1.0)


def test_backward_compares_gradients_and_catches_a_wrong_one():
    x = torch.randn(3, 4)
    layout = [contiguous(2)]
    assert backward(_call(torch.sin, x), layout)[0] == "compared"
    with pytest.raises(Mismatch, match="gradients"):
        backward(_call(_GradientOffOnNeuron.apply, x), layout)
