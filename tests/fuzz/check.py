"""Runs one call on CPU and on neuron and holds neuron to CPU's answer.

The neuron call gets copies of the CPU call's tensors with the same storage, sizes, strides and
offsets (tensors that share storage on CPU share it on neuron: aliasing and overlap are kept);
CPU scalar operands stay on CPU. Then:

- errors: where CPU raises, neuron must raise an exception of the same type, and only then;
- results: the same structure, types, dtypes, shapes, strides (of dimensions longer than one:
  a stride of a dimension of size 0 or 1 means nothing), the same aliasing (an in-place or out=
  call returns its self or out tensor), and values within the bound that follows from the
  arithmetic of the CPU run (tests/error_bounds.py; NaNs and infinities where CPU's are,
  integers and booleans equal);
- arguments after the call: what the op wrote into them (self, out=) the same way, strides of a
  resized out= included;
- warnings: CPU's warning that an out= with elements was resized, where and only where CPU gives
  it.

Values drawn from a random generator (the CPU run calls an op tagged nondeterministic_seeded)
are compared by shape, dtype and strides only.

compiled() does the same for torch.compile(backend="neuron") of the functional call, against
CPU's eager result: values, dtypes and shapes, and an error where CPU raises one."""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch.utils import _pytree as pytree

from error_bounds import ErrorBounds, check_within
from parity import Mismatch, StorageCopier, both_raised

DEVICE = "neuron"
RESIZED = "was resized"


def _copy(call, device: str):
    """(input, args, kwargs) of `call` with every tensor copied to `device` (storage kept),
    host scalar operands left as they are."""
    copier = StorageCopier(device)

    def one(t):
        return t if id(t) in call.host else copier.tensor(t)

    data, args, kwargs = pytree.tree_map_only(torch.Tensor, one,
                                              (call.input, call.args, call.kwargs))
    if device != "cpu" and kwargs.get("device") in ("cpu", torch.device("cpu")):
        kwargs["device"] = device  # a factory's device argument
    return data, args, kwargs


def _run(fn, arguments):
    """(result, error, resize warnings) of fn(*arguments)."""
    data, args, kwargs = arguments
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result, error = fn(data, *args, **kwargs), None
        except Exception as e:  # noqa: BLE001 - whatever CPU raises, neuron must raise too
            result, error = None, e
    resized = [str(w.message) for w in caught if RESIZED in str(w.message)]
    return result, error, resized


def _strides(t: torch.Tensor) -> tuple:
    """The strides that mean something: those of dimensions longer than one."""
    if t.numel() == 0:
        return ()
    return tuple((d, s) for d, (n, s) in enumerate(zip(t.shape, t.stride())) if n > 1)


def compare_tensor(actual, expected: torch.Tensor, bound: float, where: str, values: bool,
                   strides: bool = True) -> float:
    if not isinstance(actual, torch.Tensor):
        raise Mismatch(f"{where}: CPU gave a tensor, neuron {type(actual).__name__}")
    want_device = DEVICE if expected.device.type == "cpu" else expected.device.type
    if actual.device.type not in (want_device, expected.device.type):
        raise Mismatch(f"{where}: the result is on {actual.device}")
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        raise Mismatch(f"{where}: neuron {actual.dtype}{list(actual.shape)} vs "
                       f"CPU {expected.dtype}{list(expected.shape)}")
    if strides and _strides(actual) != _strides(expected):
        raise Mismatch(f"{where}: neuron strides {actual.stride()} vs CPU {expected.stride()} "
                       f"(shape {list(expected.shape)})")
    if not values or expected.layout != torch.strided:
        return 0.0
    return check_within(actual, expected, bound, where)


def compare(actual, expected, bounds: list[float], where: str, values: bool,
            strides: bool = True) -> float:
    """Compares nested results leaf by leaf; returns the largest fraction of the allowed
    difference seen."""
    actual_leaves, actual_spec = pytree.tree_flatten(actual)
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    if actual_spec != expected_spec:
        raise Mismatch(f"{where}: neuron returned {actual_spec}, CPU {expected_spec}")
    margin, tensors = 0.0, 0
    for i, (a, e) in enumerate(zip(actual_leaves, expected_leaves)):
        here = f"{where}[{i}]" if len(expected_leaves) > 1 else where
        if isinstance(e, torch.Tensor):
            margin = max(margin, compare_tensor(a, e, bounds[tensors], here, values, strides))
            tensors += 1
        elif isinstance(e, torch.device):
            continue
        elif isinstance(e, float) and isinstance(a, float):
            if values and not (a == e or (a != a and e != e)):
                try:
                    torch.testing.assert_close(a, e)
                except AssertionError:
                    raise Mismatch(f"{here}: neuron {a!r} vs CPU {e!r}") from None
        elif type(a) is not type(e) or a != e:
            raise Mismatch(f"{here}: neuron {a!r:.200} vs CPU {e!r:.200}")
    return margin


def _aliases(result, arguments) -> list:
    """For each tensor leaf of `result`: the position of the argument tensor it is (in-place
    and out= calls return their self or out), or None."""
    leaves = [t for t in pytree.tree_leaves(arguments) if isinstance(t, torch.Tensor)]
    return [
        next((i for i, t in enumerate(leaves) if t is r), None)
        for r in pytree.tree_leaves(result) if isinstance(r, torch.Tensor)
    ]


def _on_cpu(call):
    """The CPU's run of `call` ((arguments, (result, error, resize warnings))), and a second run
    on copies under ErrorBounds ((its arguments, its result, the bounds))."""
    traced_arguments = _copy(call, "cpu")  # copied before the first run can write into them
    arguments = (call.input, call.args, call.kwargs)
    cpu = (arguments, _run(call.fn, arguments))
    bounds = ErrorBounds()
    with bounds:
        traced, _, _ = _run(call.fn, traced_arguments)
    return cpu, traced_arguments, traced, bounds


def check(call, strides: bool = True) -> tuple[str, float]:
    """Runs `call` on both devices; raises Mismatch; returns (what happened, margin). Without
    `strides`, the results' strides are not compared (known.DEVICE_PATH_STRIDES)."""
    neuron_arguments = _copy(call, DEVICE)  # before the CPU's run can write into them
    cpu, traced_arguments, traced, bounds = _on_cpu(call)
    cpu_arguments, (expected, cpu_error, cpu_resized) = cpu
    actual, neuron_error, neuron_resized = _run(call.fn, neuron_arguments)
    if both_raised(cpu_error, neuron_error, "the call"):
        return "raised on both", 0.0
    values = not bounds.seeded

    def bounds_of(result) -> list[float]:
        return [bounds.of(t) for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]

    margin = compare(actual, expected, bounds_of(traced), "result", values, strides)
    if _aliases(actual, neuron_arguments) != _aliases(expected, cpu_arguments):
        raise Mismatch("result: returns another of its arguments than CPU's (in-place/out=)")
    cpu_leaves = [t for t in pytree.tree_leaves(cpu_arguments) if isinstance(t, torch.Tensor)]
    neuron_leaves = [t for t in pytree.tree_leaves(neuron_arguments) if isinstance(t, torch.Tensor)]
    margin = max(margin, compare(neuron_leaves, cpu_leaves, bounds_of(traced_arguments),
                                 "arguments after the call", values))
    if bool(cpu_resized) != bool(neuron_resized):
        said = "warned" if cpu_resized else "did not warn"
        raise Mismatch(f"warnings: CPU {said} that out= was resized ({cpu_resized}), neuron "
                       f"{neuron_resized}")
    return "compared", margin


def compiled(call) -> str:
    """torch.compile(backend="neuron") of the functional call against CPU's eager result."""
    neuron_arguments = _copy(call, DEVICE)
    (_, (expected, cpu_error, _)), _, traced, bounds = _on_cpu(call)
    fn = call.fn

    def program(data, *args, **kwargs):
        return fn(data, *args, **kwargs)

    # A fresh Dynamo cache each time: past its recompile limit Dynamo would run eager silently.
    torch._dynamo.reset()
    actual, neuron_error, _ = _run(torch.compile(program, backend="neuron", dynamic=False),
                                   neuron_arguments)
    if cpu_error is not None or neuron_error is not None:
        if cpu_error is None:
            raise Mismatch(f"compiled: neuron raised {type(neuron_error).__name__}: "
                           f"{str(neuron_error).strip().splitlines()[0][:300]}")
        if neuron_error is None:
            raise Mismatch(f"compiled: CPU raised {type(cpu_error).__name__}, compiled neuron "
                           f"did not")
        return "raised on both"
    # A compiled graph may decompose an op (another order of the same sums): twice the bound.
    compare(actual, expected,
            [2 * bounds.of(t) for t in pytree.tree_leaves(traced) if isinstance(t, torch.Tensor)],
            "compiled result", not bounds.seeded, strides=False)
    return "compared"


def _grad_leaves(arguments, copier: StorageCopier, host: set):
    """The arguments with every floating tensor a fresh leaf that requires grad (storage and
    layout kept), and those leaves in order."""
    leaves: dict[int, torch.Tensor] = {}

    def one(t):
        if id(t) in host:
            return t
        if id(t) not in leaves:
            copy = copier.tensor(t)
            if t.is_floating_point() or t.is_complex():
                copy = copy.detach().requires_grad_(True)
            leaves[id(t)] = copy
        return leaves[id(t)]

    copied = pytree.tree_map_only(torch.Tensor, one, arguments)
    return copied, [t for t in leaves.values() if t.requires_grad]


def _differentiable(result) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(result)
            if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]


def backward(call, cotangent_layouts) -> tuple[str, float]:
    """torch.autograd.grad of the functional call's floating outputs, with cotangents laid out by
    `cotangent_layouts` (one per output; the backward kernels see those layouts), with respect to
    every floating input: the gradients compared as results are (values within the bound of the
    CPU's forward and backward arithmetic, strides, dtypes), errors as errors."""
    runs = {}
    bounds = ErrorBounds()
    generator = torch.Generator().manual_seed(0)
    cotangents = None
    for device in ("cpu", "traced", DEVICE):
        arguments, leaves = _grad_leaves((call.input, call.args, call.kwargs),
                                         StorageCopier("cpu" if device == "traced" else device),
                                         call.host)
        data, args, kwargs = arguments
        context = bounds if device == "traced" else contextlib.nullcontext()
        with context:
            try:
                outputs = _differentiable(call.fn(data, *args, **kwargs))
                if cotangents is None:
                    cotangents = [layout.apply(torch.randn(o.shape, generator=generator)
                                               .to(o.dtype))
                                  for o, layout in zip(outputs, cotangent_layouts)]
                if not outputs or not leaves or len(outputs) != len(cotangents):
                    return "no differentiable output", 0.0
                copier = StorageCopier("cpu" if device == "traced" else device)
                grads = torch.autograd.grad(outputs, leaves, [copier.tensor(c) for c in cotangents],
                                            allow_unused=True)
                runs[device] = (list(grads), None)
            except Exception as error:  # noqa: BLE001 - whatever CPU raises, neuron must too
                runs[device] = (None, error)
    (expected, cpu_error), (actual, neuron_error) = runs["cpu"], runs[DEVICE]
    if both_raised(cpu_error, neuron_error, "the backward call"):
        return "raised on both", 0.0
    traced = runs["traced"][0] or []
    if [g is None for g in actual] != [g is None for g in expected]:
        raise Mismatch("gradients: neuron and CPU disagree on which inputs get one")
    keep = [i for i, g in enumerate(expected) if g is not None]
    return "compared", compare(
        [actual[i] for i in keep], [expected[i] for i in keep],
        [bounds.of(traced[i]) if i < len(traced) and traced[i] is not None else bounds.largest
         for i in keep],
        "gradients", not bounds.seeded)
