"""Memory-overlap checks as the CPU makes them (at::assert_no_internal_overlap,
assert_no_partial_overlap, assert_no_overlap): an op whose written tensor partly overlaps what it
reads, or overlaps itself, raises the CPU's "unsupported operation" error on neuron too, and
leaves the tensors as they were; what the CPU allows (a full overlap: x.add_(x)) computes the
CPU's values. Neuron kernels run ATen's CPU code on host views of the device buffers; before the
views of one neuron storage shared one host storage, the CPU code could not see the overlap and
computed order-dependent values (x[5:15].add_(x[0:10]), torch.add(d[:3], 2, out=d[1:4]),
index_put_, index_fill_, put_, pow(out=), shifts). The CPU fallback keeps the sharing too."""

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore")

DEV = "neuron"


def ramp(dtype=torch.float32, n=10):
    return lambda device: torch.arange(n, dtype=dtype, device=device)


def expanded(device):
    return torch.full((1,), 0.5, device=device).expand(6)


def idx(values, device):
    return torch.tensor(values, device=device)


# name -> (make the tensor, the call on it, whether the CPU refuses it)
CASES = {
    "add_out_partial": (ramp(), lambda d: torch.add(d[:3], 2, out=d[1:4]), True),
    "add__views": (ramp(n=20), lambda x: x[5:15].add_(x[0:10]), True),
    "sub__views": (ramp(n=20), lambda x: x[5:15].sub_(x[0:10]), True),
    "mul__views": (ramp(n=20), lambda x: x[5:15].mul_(x[0:10]), True),
    "div__views": (ramp(n=20), lambda x: x[5:15].div_(x[1:11]), True),
    "mul_out_partial": (ramp(), lambda a: torch.mul(a[:5], a[2:7], out=a[1:6]), True),
    "atan2_out_partial": (ramp(), lambda a: torch.atan2(a[:5], a[2:7], out=a[1:6]), True),
    "pow_out": (ramp(), lambda a: torch.pow(a[:5], 2, out=a[1:6]), True),
    "pow_tensor_out": (ramp(), lambda a: torch.pow(a[:5], a[3:8], out=a[1:6]), True),
    "left_shift_out": (ramp(torch.int64),
                       lambda b: torch.bitwise_left_shift(b[:5], 1, out=b[1:6]), True),
    "right_shift_": (ramp(torch.int64), lambda b: b[1:6].bitwise_right_shift_(b[:5]), True),
    # <<= is its own op (__ilshift__), served by the CPU fallback
    "ilshift_operator": (ramp(torch.int64), lambda b: b[1:6].__ilshift__(b[:5]), True),
    "index_put__value": (ramp(), lambda x: x.index_put_((idx([2, 1, 0], x.device),), x[:3]),
                         True),
    "index_put__index": (ramp(torch.int64), lambda i: i.index_put_((i[:3],), i[3:6]), True),
    "index_fill__index": (ramp(torch.int64), lambda i: i.index_fill_(0, i[:1], 0), True),
    "index_copy__source": (ramp(), lambda x: x.index_copy_(0, idx([1, 2], x.device), x[2:4]),
                           True),
    "index_add__source": (ramp(), lambda x: x.index_add_(0, idx([1, 2], x.device), x[2:4]), True),
    "put__expanded": (expanded, lambda x: x.put_(idx([0], x.device), idx([1.0], x.device)), True),
    "put__source": (ramp(), lambda x: x.put_(idx([1, 2], x.device), x[2:4]), True),
    "put__index": (ramp(torch.int64), lambda i: i.put_(i[:2], i[2:4]), True),
    "scatter__src": (ramp(), lambda x: x.scatter_(0, idx([1, 2], x.device), x[2:4]), True),
    "scatter__index": (ramp(torch.int64), lambda i: i.scatter_(0, i[:2], i[2:4]), True),
    "gather_out": (ramp(), lambda x: torch.gather(x[:5], 0, idx([0, 1, 2], x.device),
                                                  out=x[1:4]), True),
    "index_select_out": (ramp(), lambda x: torch.index_select(x[:5], 0, idx([0, 1, 2], x.device),
                                                              out=x[1:4]), True),
    "cat_out": (ramp(), lambda x: torch.cat([x[:2], x[2:4]], out=x[1:5]), True),
    "where_out": (ramp(), lambda x: torch.where(x[:5] > 2, x[:5], x[5:], out=x[1:6]), True),
    "addcmul_": (ramp(), lambda x: x[1:6].addcmul_(x[:5], x[2:7]), True),
    "lerp_": (ramp(), lambda x: x[1:6].lerp_(x[:5], 0.5), True),
    "clamp_out": (ramp(), lambda x: torch.clamp(x[:5], 1, 3, out=x[1:6]), True),
    "exp_out": (ramp(), lambda x: torch.exp(x[:5], out=x[1:6]), True),
    "cumsum_out": (ramp(), lambda x: torch.cumsum(x[:5], 0, out=x[1:6]), True),
    "copy_": (ramp(), lambda x: x[1:6].copy_(x[:5]), True),
    "sigmoid__expanded": (expanded, lambda x: x.sigmoid_(), True),
    "add__expanded": (expanded, lambda x: x.add_(1), True),
    # what the CPU allows
    "add_out_full": (ramp(), lambda a: torch.add(a, a, out=a), False),
    "add__self": (ramp(), lambda a: a.add_(a), False),
    "mul__disjoint_views": (ramp(n=20), lambda x: x[10:20].mul_(x[0:10]), False),
    "index_put__expanded": (expanded, lambda x: x.index_put_((idx([2, 1, 0], x.device),),
                                                             torch.ones(3, device=x.device)),
                            False),
    "masked_fill__mask_itself": (lambda d: torch.tensor([True, False, True], device=d),
                                 lambda m: m.masked_fill_(m, False), False),
    "sum_out": (ramp(), lambda x: torch.sum(x[:6].view(2, 3), 0, out=x[6:9]), False),
    "fill__expanded": (expanded, lambda x: x.fill_(1.0), False),
}


def outcome(case, device):
    make, call, _ = CASES[case]
    t = make(device)
    try:
        call(t)
        error = None
    except RuntimeError as e:
        error = str(e).splitlines()[0]
    return error, t.cpu()


@pytest.mark.parametrize("case", CASES)
def test_overlap_is_refused_where_the_cpu_refuses_it(case):
    cpu_error, cpu_after = outcome(case, "cpu")
    assert (cpu_error is not None) == CASES[case][2], f"the CPU's answer changed: {cpu_error}"
    neuron_error, neuron_after = outcome(case, DEV)
    assert neuron_error == cpu_error
    # Refused: nothing written. Allowed: the CPU's values.
    torch.testing.assert_close(neuron_after, cpu_after, rtol=0, atol=0)


def test_fallback_with_shared_memory_still_counts_as_fallback():
    """The CPU fallback runs such a call on host views, not copies, and still reports it."""
    import torch_neuronx

    torch_neuronx.clear_op_tracking()
    b = torch.arange(10, device=DEV)
    b[5:10].__ilshift__(b[0:5])  # disjoint views of one storage: allowed, computed in place
    expected = torch.arange(10)
    expected[5:10].__ilshift__(expected[0:5])
    torch.testing.assert_close(b.cpu(), expected, rtol=0, atol=0)
    assert "aten::__ilshift__.Tensor" in torch_neuronx.get_fallback_ops()
