"""Foreach (multi-tensor) kernels on neuron against the CPU's foreach ops, on the same inputs.

The ops torch.optim's foreach implementations call have kernels of their own on neuron
(csrc/backend/ops/ForeachKernels.cpp): one pass over all tensors of the lists. Tolerances follow
from their arithmetic: each result is one correctly rounded operation, or a multiply-add that the
CPU's vectorized loops fuse and its scalar tails (and builds without FMA) do not, or a square
root, exact here and within a bit of exact in the CPU's math library. So every element is within
a few units in the last place of the magnitudes involved (`bound` below). Calls those kernels do
not serve run as host math, and must give the CPU's results and errors too."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_neuronx  # noqa: F401

DEV = "neuron"
# Sizes below and above the parallel grain (32768 elements), odd lengths for the loop tails, an
# empty tensor, and a matrix.
SHAPES = [(3,), (33001,), (0,), (256, 64), (70001,), (5, 7)]


def make_lists(k, dtype, positive=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    lists = []
    for _ in range(k):
        tensors = [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in SHAPES]
        lists.append([t.abs() + 0.5 for t in tensors] if positive else tensors)
    return lists


def on_neuron(lists):
    return [[t.to(DEV) for t in tensors] for tensors in lists]


SCALARS = [0.25 * (i + 1) * (-1) ** i for i in range(len(SHAPES))]

# name: (number of lists, positive inputs, the call, the magnitude each result is exact to a few
# units in the last place of, from the inputs in float64)
CASES = {
    "mul.Scalar": (1, False, lambda f, a: f("mul")(a[0], 0.37),
                   lambda a, i: (a[0][i] * 0.37).abs()),
    "mul.ScalarList": (1, False, lambda f, a: f("mul")(a[0], SCALARS),
                       lambda a, i: (a[0][i] * SCALARS[i]).abs()),
    "mul.List": (2, False, lambda f, a: f("mul")(a[0], a[1]),
                 lambda a, i: (a[0][i] * a[1][i]).abs()),
    "mul.Tensor": (1, False, lambda f, a: f("mul")(a[0], torch.tensor(0.3, dtype=a[0][0].dtype,
                                                                      device=a[0][0].device)),
                   lambda a, i: (a[0][i] * 0.3).abs()),
    "add.Scalar": (1, False, lambda f, a: f("add")(a[0], 1e-3),
                   lambda a, i: a[0][i].abs() + 1e-3),
    "add.ScalarList": (1, False, lambda f, a: f("add")(a[0], SCALARS),
                       lambda a, i: a[0][i].abs() + abs(SCALARS[i])),
    "add.List alpha": (2, False, lambda f, a: f("add")(a[0], a[1], alpha=-0.01),
                       lambda a, i: a[0][i].abs() + 0.01 * a[1][i].abs()),
    "add.List": (2, False, lambda f, a: f("add")(a[0], a[1]),
                 lambda a, i: a[0][i].abs() + a[1][i].abs()),
    "div.Scalar": (1, False, lambda f, a: f("div")(a[0], 3.0),
                   lambda a, i: a[0][i].abs() / 3.0),
    "div.ScalarList": (1, False, lambda f, a: f("div")(a[0], SCALARS),
                       lambda a, i: (a[0][i] / SCALARS[i]).abs()),
    "div.List": (2, True, lambda f, a: f("div")(a[0], a[1]),
                 lambda a, i: (a[0][i] / a[1][i]).abs()),
    "lerp.Scalar small weight": (2, False, lambda f, a: f("lerp")(a[0], a[1], 0.1),
                                 lambda a, i: a[0][i].abs() + a[1][i].abs()),
    "lerp.Scalar large weight": (2, False, lambda f, a: f("lerp")(a[0], a[1], 0.9),
                                 lambda a, i: a[0][i].abs() + a[1][i].abs()),
    "lerp.ScalarList": (2, False, lambda f, a: f("lerp")(a[0], a[1], [0.1, 0.9, 0.5, 0.3, 0.7,
                                                                      1.0]),
                        lambda a, i: a[0][i].abs() + a[1][i].abs()),
    "lerp.List": (3, True, lambda f, a: f("lerp")(a[0], a[1], [w * 0.9 for w in a[2]]),
                  lambda a, i: (a[0][i].abs() + a[1][i].abs()) * (1 + 0.9 * a[2][i])),
    "addcmul.Scalar": (3, False, lambda f, a: f("addcmul")(a[0], a[1], a[2], 0.001),
                       lambda a, i: a[0][i].abs() + (0.001 * a[1][i] * a[2][i]).abs()),
    "addcmul.ScalarList": (3, False, lambda f, a: f("addcmul")(a[0], a[1], a[2], SCALARS),
                           lambda a, i: a[0][i].abs() + (SCALARS[i] * a[1][i] * a[2][i]).abs()),
    "addcdiv.Scalar": (3, True, lambda f, a: f("addcdiv")(a[0], a[1], a[2], -0.01),
                       lambda a, i: a[0][i].abs() + (0.01 * a[1][i] / a[2][i]).abs()),
    "addcdiv.ScalarList": (3, True, lambda f, a: f("addcdiv")(a[0], a[1], a[2], SCALARS),
                           lambda a, i: a[0][i].abs() + (SCALARS[i] * a[1][i] / a[2][i]).abs()),
    "sqrt": (1, True, lambda f, a: f("sqrt")(a[0]), lambda a, i: a[0][i].sqrt()),
}


def foreach(in_place):
    return lambda name: getattr(torch, f"_foreach_{name}_" if in_place else f"_foreach_{name}")


def run(case, in_place, lists):
    _, _, call, _ = CASES[case]
    result = call(foreach(in_place), lists)
    return lists[0] if in_place else list(result)


def assert_within_ulps(neuron, cpu, bounds, dtype, ulps=4):
    eps = torch.finfo(dtype).eps
    for n, c, b in zip(neuron, cpu, bounds):
        assert n.device.type == DEV and n.dtype == c.dtype and n.shape == c.shape
        diff = (n.cpu().double() - c.double()).abs()
        assert bool((diff <= ulps * eps * b + torch.finfo(dtype).tiny).all()), (
            f"max difference {diff.max().item():.3g}")


@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "functional"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_matches_cpu(case, dtype, in_place):
    k, positive, _, bound = CASES[case]
    cpu = make_lists(k, dtype, positive)
    inputs64 = [[t.double() for t in tensors] for tensors in cpu]
    neuron = on_neuron(cpu)
    before = [t for t in neuron[0]]
    expected = run(case, in_place, cpu)
    got = run(case, in_place, neuron)
    assert_within_ulps(got, expected, [bound(inputs64, i) for i in range(len(SHAPES))], dtype)
    if in_place:  # the same tensors, updated
        assert all(g is b for g, b in zip(got, before))
    else:  # fresh tensors; the inputs untouched
        assert all(g.data_ptr() != b.data_ptr() for g, b in zip(got, before) if g.numel())
        assert all(torch.equal(b.cpu(), c) for b, c in zip(neuron[0], make_lists(k, dtype,
                                                                                 positive)[0]))


def test_zero_():
    neuron = on_neuron(make_lists(1, torch.float32))[0]
    torch._foreach_zero_(neuron)
    assert all(not t.cpu().any() for t in neuron)


def per_tensor_ops(fn):
    """Names of the ops run beneath the foreach op: the CPU's per-tensor loop, or nothing."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events()
            if e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::_foreach")]


def test_one_pass_without_per_tensor_ops():
    params, grads = on_neuron(make_lists(2, torch.float32))
    assert per_tensor_ops(lambda: torch._foreach_add_(params, grads, alpha=-0.1)) == []
    assert per_tensor_ops(lambda: torch._foreach_addcdiv_(params, grads, grads, SCALARS)) == []


@pytest.mark.parametrize("layout", [
    "transposed", "mixed dtypes", "reversed aliases", "repeated tensor", "bfloat16", "integer",
    "cpu scalar list tensor", "overlapping views",
])
def test_calls_served_by_host_math_match_cpu(layout):
    """What the kernels do not serve gives the CPU's results, including the CPU's in-order
    semantics where the written tensors alias one another or the inputs."""
    def build(device):
        g = torch.Generator().manual_seed(3)
        a = [torch.randn(40, 30, generator=g) for _ in range(3)]
        b = [torch.randn(40, 30, generator=g) for _ in range(3)]
        if layout == "transposed":
            a = [t.t() for t in a]
            b = [t.t() for t in b]
        elif layout == "mixed dtypes":
            a[1], b[1] = a[1].double(), b[1].double()
        elif layout == "bfloat16":
            a, b = [t.bfloat16() for t in a], [t.bfloat16() for t in b]
        elif layout == "integer":
            a, b = [(t * 10).long() for t in a], [(t * 10).long() for t in b]
        a = [t.to(device) for t in a]
        b = [t.to(device) for t in b]
        if layout == "reversed aliases":
            b = a[::-1]
        elif layout == "overlapping views":
            base = torch.arange(20.0).to(device)
            a, b = [base[0:10], base[5:15]], [base[10:20], base[0:10]]
        elif layout == "repeated tensor":
            a, b = [a[0], a[0], a[1]], [b[0], b[1], b[2]]
        return a, b

    def outcome(device, call):
        a, b = build(device)
        try:
            call(a, b)
        except RuntimeError as error:
            return str(error).splitlines()[0]
        return [t.cpu() for t in a]

    calls = [lambda a, b: torch._foreach_add_(a, b), lambda a, b: torch._foreach_mul_(a, b)]
    if layout == "cpu scalar list tensor":
        scalars = torch.tensor([0.5, -2.0, 3.0])
        calls.append(lambda a, b: torch._foreach_addcmul_(a, b, b, scalars))
    for call in calls:
        on_cpu, on_neuron_ = outcome("cpu", call), outcome(DEV, call)
        if isinstance(on_cpu, str):  # the CPU refuses it (a partial overlap): so does neuron
            assert on_neuron_ == on_cpu
            continue
        for n, c in zip(on_neuron_, on_cpu):
            assert n.dtype == c.dtype
            torch.testing.assert_close(n, c, rtol=0, atol=0)


@pytest.mark.parametrize("call", [
    lambda a, b: torch._foreach_add_(a, b[:-1]),
    lambda a, b: torch._foreach_mul_(a, [1.0, 2.0]),
    lambda a, b: torch._foreach_addcmul_(a, b, b[:1]),
], ids=["list lengths", "scalar list length", "third list length"])
def test_bad_input_raises_as_on_cpu(call):
    cpu = make_lists(2, torch.float32)
    neuron = on_neuron(cpu)
    with pytest.raises(RuntimeError) as on_cpu:
        call(*cpu)
    with pytest.raises(RuntimeError) as on_neuron_error:
        call(*neuron)
    assert str(on_neuron_error.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    assert all(torch.equal(n.cpu(), c) for n, c in zip(neuron[0], cpu[0]))  # nothing written


def test_mismatched_shapes_raise():
    a = [torch.zeros(4, device=DEV)]
    with pytest.raises(RuntimeError):
        torch._foreach_add_(a, [torch.zeros(5, device=DEV)])
    assert torch.equal(a[0].cpu(), torch.zeros(4))


def test_mixed_devices_raise_naming_them():
    a = [torch.zeros(4, device=DEV)]
    with pytest.raises(RuntimeError, match="neuron|cpu"):
        torch._foreach_add_(a, [torch.zeros(4)])


@pytest.mark.parametrize("make_optimizer", [
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=True),
    lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, foreach=True),
    lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True, foreach=True),
    lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5, centered=True, foreach=True),
], ids=["AdamW", "Adam amsgrad", "SGD nesterov", "RMSprop centered"])
def test_optimizer_steps_match_cpu(make_optimizer):
    """Three steps with clipped gradients, each optimizer's foreach implementation on both
    devices: the only operation not bit for bit the CPU's is sqrt (a unit in the last place),
    which enters each update through one division."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 200), torch.nn.Tanh(), torch.nn.Linear(200, 8))
    twin = torch.nn.Sequential(torch.nn.Linear(64, 200), torch.nn.Tanh(),
                               torch.nn.Linear(200, 8)).to(DEV)
    twin.load_state_dict(model.state_dict())
    optimizers = make_optimizer(model.parameters()), make_optimizer(twin.parameters())
    x = torch.randn(16, 64)
    for _ in range(3):
        for m, opt, device in ((model, optimizers[0], "cpu"), (twin, optimizers[1], DEV)):
            m(x.to(device)).square().mean().backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05, foreach=True)
            opt.step()
            opt.zero_grad()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach())
