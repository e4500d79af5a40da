"""ModuleInfo parity: PyTorch's own module samples (module_db) run on neuron and on CPU, compared.

For every ModuleInfo in torch.testing._internal.common_modules.module_db, in float32 and in
bfloat16, each eval-mode sample of ``module_info.module_inputs_func(..., device="cpu",
training=False)`` is run twice: by the CPU module, and by a deepcopy of that module moved to neuron
(``.to("neuron")``) on the sample's inputs copied to neuron. The module is built on CPU (seeded),
converted to the dtype as PyTorch's own test_modules.py does, and put in eval mode; lazy modules
are materialised by one CPU forward first, so both devices start from the same parameters.

Per sample:
- forward: the outputs must match CPU's (same structure, types, shapes, dtypes, on neuron), and so
  must the sample's input tensors and the module's buffers after the call. Where CPU raises,
  neuron must raise an exception of the same type (bfloat16 samples of modules whose CPU kernels
  lack bfloat16, e.g. CTCLoss, count as "raised on both").
- backward: ``torch.autograd.grad`` of the differentiable outputs, with a random cotangent drawn
  once on CPU from a seed fixed per sample, with respect to every input that requires grad and
  every parameter of the module. The gradients must match CPU's.

A sample passes when all of these hold; the session summary (conftest.py) reports the pass rate
per sample.

Tolerances: derived from the arithmetic of the CPU run, per compared tensor
-----------------------------------------------------------------------------
(The bound's code lives in tests/error_bounds.py, shared with the layout fuzzer and the Diffusers
tests.)
Neuron runs the same ATen math as CPU, but a kernel may sum in another order (another blocking,
thread count or kernel), and in bfloat16 a difference of one float32 ulp before the final rounding
can flip the rounded result by one bfloat16 ulp. The bound therefore follows the arithmetic each
compared tensor went through on CPU. A third CPU run (of another deepcopy, on copies of the
inputs) runs under a dispatch mode that sees every ATen op, forward and backward, and gives each
result an error bound, in units of its magnitude:

    bound(result) = max(bound(inputs)) + 2 * (u_out + K * u_acc)

- u_out: the unit roundoff of the result's dtype, for its one rounding: float32 2^-24,
  bfloat16 2^-8 (8 significant bits).
- K * u_acc: a sum of K terms carries up to K * u_acc relative error (the classical recursive
  summation bound, relative to the sum of the terms' magnitudes). CPU kernels accumulate float32
  and bfloat16 in float32, so u_acc = 2^-24. K is the op's accumulation length: the contracted
  size for matrix products (mm, addmm, bmm, ...), in-channels/groups times kernel size for a
  convolution (and for its backward also the batch times output positions a weight gradient sums
  over), and otherwise the ratio of the largest input to the smallest output (a sum, a mean, the
  mean/rstd of layer and group norm, a loss' reduction); an op that keeps its input's shape but is
  not pointwise (softmax, cumsum, a norm's normalisation) sums along at most its input's largest
  dimension, or its whole input when it has a list of dims.
- The factor 2: each device's result lies within the bound of the exact value, so the two differ
  by at most twice it.
- Errors along a chain add up (the bound of a result starts from the largest bound of its inputs).
  Views and copies that keep or widen the dtype do not round and add nothing.
- A few fused CPU kernels round inside themselves (flash attention rounds the probabilities to
  the input dtype before the second matrix product); FUSED_ROUNDINGS counts those.

A neuron tensor passes when every finite element satisfies
``|neuron - cpu| <= bound * max(max|cpu|, smallest normal)``: the error bound of a sum is relative
to the magnitudes of its terms, not to the (possibly cancelling) result, and the tensor's largest
magnitude stands for that scale. NaNs and infinities must sit where CPU's are. Integer outputs
(pooling indices) must be equal. The summary reports the largest observed fraction of the allowed
difference, so the margin is visible.

Random values: a sample whose CPU run draws random numbers (an ATen op tagged
nondeterministic_seeded) is compared by types and shapes only, and counted apart. In eval mode no
module of module_db does so at present.

By default (``make test``) a deterministic subset runs: every module and both dtypes, forward and
backward, but only every STRIDE-th sample (``TORCH_NEURONX_MODULEINFO_STRIDE``, default 4): sample
i of the module at position p of module_db runs when (i + p) % STRIDE == 0, so consecutive modules
take different samples, and a module none of whose n samples falls on the stride runs its
sample p % n. Known failures run until their first failing sample, the subset's samples first
and then the others (that is all a strict xfail needs to know; the full run counts them all), so
one that starts passing fails the run (XPASS).
``TORCH_NEURONX_MODULEINFO=full`` (``make moduleinfo``) runs every sample. Known failures live in
known_failures.py, nowhere else. See docs/moduleinfo.md.
"""

from __future__ import annotations

import copy
import math
import os
import zlib
from typing import ClassVar

import pytest
import torch

from torch.testing._internal.common_modules import module_db
from torch.utils import _pytree as pytree

from error_bounds import ErrorBounds, check_within, floating
from parity import WARNING_FILTERS, Mismatch, StorageCopier, both_raised, dtype_name, first_line

from .known_failures import KNOWN_FAILURES

DEVICE = "neuron"
FULL = os.environ.get("TORCH_NEURONX_MODULEINFO", "").lower() == "full"
STRIDE = int(os.environ.get("TORCH_NEURONX_MODULEINFO_STRIDE", "4"))
DTYPES = (torch.float32, torch.bfloat16)
SEED = 1234  # modules are built, and both devices run, right after torch.manual_seed(SEED)

pytestmark = WARNING_FILTERS


def _subset(samples: list, position: int, known: bool) -> list[tuple[int, object]]:
    """(index, sample) pairs this run checks; see the module docstring."""
    indexed = list(enumerate(samples))
    if FULL or not indexed:
        return indexed
    chosen = [(i, s) for i, s in indexed if (i + position) % STRIDE == 0]
    chosen = chosen or [indexed[position % len(indexed)]]
    if known:
        # The subset's own samples first, then the rest: the test stops at the first failure.
        return chosen + [pair for pair in indexed if pair not in chosen]
    return chosen


def _cases():
    for position, module_info in enumerate(module_db):
        for dtype in DTYPES:
            key = (module_info.name, dtype_name(dtype))
            marks = []
            reason = KNOWN_FAILURES.get(key)
            if reason is not None:
                # Strict: a known failure that passes fails the run, so the list stays honest.
                marks.append(pytest.mark.xfail(reason=reason, strict=True))
            yield pytest.param(
                module_info, dtype, position, id=f"{module_info.name}-{key[1]}", marks=marks
            )


# ---------------------------------------------------------------------------------------------
# Copying inputs


def _forward_arguments(module_input):
    forward = module_input.forward_input
    return list(forward.args), dict(forward.kwargs)


# ---------------------------------------------------------------------------------------------
# Error bounds from the CPU run's arithmetic (see the module docstring)


# ---------------------------------------------------------------------------------------------
# Comparison


class _Margin:
    """The largest observed |neuron - cpu| as a fraction of what the bound allows, per dtype and
    where it was; and the largest within the current sample (0: bit-identical to CPU)."""

    largest: ClassVar[dict[str, tuple[float, str]]] = {}
    sample = 0.0
    # (module, dtype) -> (samples not bit-identical, largest fraction), for the -v summary.
    inexact: ClassVar[dict[str, tuple[int, float]]] = {}

    @classmethod
    def note(cls, dtype: torch.dtype, fraction: float, where: str) -> None:
        cls.sample = max(cls.sample, fraction)
        name = dtype_name(dtype)
        if name not in cls.largest or fraction > cls.largest[name][0]:
            cls.largest[name] = (fraction, where)


def _compare_tensor(actual, expected: torch.Tensor, bound: float, where: str, values: bool):
    if not isinstance(actual, torch.Tensor):
        raise Mismatch(f"{where}: CPU returned a tensor, neuron {type(actual).__name__}")
    if expected.device.type == "cpu" and actual.device.type != DEVICE:
        raise Mismatch(f"{where}: the result is on {actual.device}, expected {DEVICE}")
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        raise Mismatch(
            f"{where}: neuron {actual.dtype}{list(actual.shape)} vs "
            f"CPU {expected.dtype}{list(expected.shape)}"
        )
    if not values:
        return
    _Margin.note(expected.dtype, check_within(actual, expected, bound, where), where)


def _compare(actual, expected, bounds, where: str, values: bool) -> None:
    """Compares nested results leaf by leaf; `bounds` gives one bound per tensor leaf of
    `expected`, in order."""
    actual_leaves, actual_spec = pytree.tree_flatten(actual)
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    if actual_spec != expected_spec:
        raise Mismatch(f"{where}: neuron returned {actual_spec}, CPU {expected_spec}")
    tensors = 0
    for i, (a, e) in enumerate(zip(actual_leaves, expected_leaves)):
        if isinstance(e, torch.Tensor):
            _compare_tensor(a, e, bounds[tensors], f"{where}[{i}]", values)
            tensors += 1
        elif isinstance(e, float) and isinstance(a, float):
            if values and not (
                math.isclose(a, e, rel_tol=1e-6) or (math.isnan(a) and math.isnan(e))
            ):
                raise Mismatch(f"{where}[{i}]: neuron {a!r} vs CPU {e!r}")
        elif isinstance(e, torch.device) or e is None and a is None:
            continue
        elif type(a) is not type(e) or a != e:
            raise Mismatch(f"{where}[{i}]: neuron {a!r:.200} vs CPU {e!r:.200}")


# ---------------------------------------------------------------------------------------------
# Running one sample


def _build(module_info, module_input, dtype: torch.dtype) -> torch.nn.Module:
    """The CPU module of a sample, as PyTorch's test_modules builds it, in eval mode, lazy
    parameters materialised by one CPU forward on copies of the inputs."""
    torch.manual_seed(SEED)
    constructor = module_input.constructor_input
    module = module_info.module_cls(*constructor.args, **constructor.kwargs)
    module.to(dtype)
    module.eval()
    if module_info.is_lazy or any(
        isinstance(p, torch.nn.parameter.UninitializedParameter) for p in module.parameters()
    ):
        args, kwargs = copy.deepcopy(_forward_arguments(module_input))
        with torch.no_grad():
            module(*args, **kwargs)
    return module


def _run(module, args, kwargs):
    """(output, None) or (None, the exception raised)."""
    torch.manual_seed(SEED)
    try:
        return module(*args, **kwargs), None
    except Exception as error:  # noqa: BLE001 - whatever CPU raises, neuron must raise too
        return None, error


def _grad(outputs, inputs, cotangents):
    try:
        return list(torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True)), None
    except Exception as error:  # noqa: BLE001 - as in _run
        return None, error


def _differentiable(output) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(output) if floating(t) and t.requires_grad]


def _grad_inputs(module, args, kwargs) -> list[torch.Tensor]:
    """Every distinct input tensor that requires grad, then the module's parameters."""
    seen: dict[int, torch.Tensor] = {}
    for t in pytree.tree_leaves((args, kwargs)):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            seen.setdefault(id(t), t)
    return list(seen.values()) + [p for p in module.parameters() if p.requires_grad]


def _check_sample(module_info, module_input, dtype: torch.dtype, index: int) -> str:
    """Runs one sample on both devices; returns what it counted as, raises Mismatch."""
    where = f"{module_info.name} {dtype_name(dtype)} sample {index} {module_input.desc!r}"
    cpu_module = _build(module_info, module_input, dtype)
    neuron_module = copy.deepcopy(cpu_module).to(DEVICE)
    traced_module = copy.deepcopy(cpu_module)
    args, kwargs = _forward_arguments(module_input)
    copier = StorageCopier(DEVICE)
    neuron_args, neuron_kwargs = copier(args), copier(kwargs)
    traced_args, traced_kwargs = StorageCopier("cpu")((args, kwargs))

    expected, cpu_error = _run(cpu_module, args, kwargs)
    actual, neuron_error = _run(neuron_module, neuron_args, neuron_kwargs)
    if both_raised(cpu_error, neuron_error, f"{where} forward"):
        return "raised on both"

    # Cotangents drawn on CPU once, from a seed fixed per sample.
    cpu_diff, neuron_diff = _differentiable(expected), _differentiable(actual)
    generator = torch.Generator().manual_seed(
        zlib.crc32(f"{module_info.name}/{dtype}/{index}".encode())
    )
    cotangents = [torch.randn(t.shape, generator=generator, dtype=t.dtype) for t in cpu_diff]

    bounds = ErrorBounds()
    with bounds:
        traced, _ = _run(traced_module, traced_args, traced_kwargs)
        traced_grads = None
        traced_diff = _differentiable(traced)
        if traced_diff and len(traced_diff) == len(cotangents):
            traced_grads, _ = _grad(
                traced_diff, _grad_inputs(traced_module, traced_args, traced_kwargs), cotangents
            )
    values = not bounds.seeded

    def bounds_of(result) -> list[float]:
        return [bounds.of(t) for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]

    _compare(actual, expected, bounds_of(traced), f"{where} output", values)
    _compare(
        [
            t
            for t in pytree.tree_leaves((neuron_args, neuron_kwargs))
            if isinstance(t, torch.Tensor)
        ],
        [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)],
        bounds_of((traced_args, traced_kwargs)),
        f"{where} input tensors after the call",
        values,
    )
    _compare(
        dict(neuron_module.named_buffers()),
        dict(cpu_module.named_buffers()),
        bounds_of(dict(traced_module.named_buffers())),
        f"{where} buffers after the call",
        values,
    )

    if len(cpu_diff) != len(neuron_diff):
        raise Mismatch(
            f"{where}: {len(neuron_diff)} differentiable outputs on neuron, {len(cpu_diff)} on CPU"
        )
    if not cpu_diff:
        return "forward only (no differentiable output)"
    cpu_inputs = _grad_inputs(cpu_module, args, kwargs)
    neuron_inputs = _grad_inputs(neuron_module, neuron_args, neuron_kwargs)
    expected_grads, cpu_error = _grad(cpu_diff, cpu_inputs, cotangents)
    actual_grads, neuron_error = _grad(
        neuron_diff, neuron_inputs, [c.to(DEVICE) for c in cotangents]
    )
    if both_raised(cpu_error, neuron_error, f"{where} backward"):
        return "forward compared, backward raised on both"
    parameters = [f"parameter {n}" for n, p in cpu_module.named_parameters() if p.requires_grad]
    names = [f"input {i}" for i in range(len(cpu_inputs) - len(parameters))] + parameters
    grad_bounds = (
        [bounds.of(g) if g is not None else 0.0 for g in traced_grads]
        if traced_grads is not None
        else [bounds.largest] * len(expected_grads)
    )
    for name, a, e, bound in zip(names, actual_grads, expected_grads, grad_bounds):
        if (a is None) != (e is None):
            raise Mismatch(
                f"{where} gradient of {name}: neuron {a is None and 'None'}, CPU "
                f"{e is None and 'None'}"
            )
        if e is not None:
            _compare_tensor(a, e, bound, f"{where} gradient of {name}", values)
    return "forward and backward compared" if values else "random values, shapes compared"


# ---------------------------------------------------------------------------------------------
# The test


class _Tally:
    """Per-sample counts; the session totals go into the summary (conftest.py)."""

    totals: ClassVar[dict[str, int]] = {}
    identical: ClassVar[list[int]] = [
        0
    ]  # passed samples whose every compared value equals CPU's bit for bit

    @classmethod
    def add(cls, what: str) -> None:
        cls.totals[what] = cls.totals.get(what, 0) + 1

    @classmethod
    def add_identical(cls) -> None:
        cls.identical[0] += 1


@pytest.fixture(scope="module", autouse=True)
def _report_totals(request):
    request.config._neuron_moduleinfo = (
        _Tally.totals,
        _Tally.identical,
        _Margin.largest,
        _Margin.inexact,
    )
    yield


def _samples(module_info, dtype: torch.dtype):
    # Samples are drawn from the global generator: seed per module so they don't depend on order.
    torch.manual_seed(zlib.crc32(module_info.name.encode()))
    samples = module_info.module_inputs_func(
        module_info, device="cpu", dtype=dtype, requires_grad=True, training=False
    )
    return [s for s in samples if s.forward_input is not None]


@pytest.mark.parametrize("module_info,dtype,position", list(_cases()))
def test_module(module_info, dtype, position):
    known = (module_info.name, dtype_name(dtype)) in KNOWN_FAILURES
    failures = []
    chosen = _subset(_samples(module_info, dtype), position, known)
    for index, module_input in chosen:
        _Margin.sample = 0.0
        try:
            what = _check_sample(module_info, module_input, dtype, index)
        except Mismatch as error:
            failures.append(str(error))
            _Tally.add("failed, known failure" if known else "failed")
            if known and not FULL:
                break  # still fails: all a strict xfail needs to know in the subset
            continue
        _Tally.add(f"passed: {what}")
        if what == "raised on both":
            continue  # nothing compared by value
        if _Margin.sample == 0.0:
            _Tally.add_identical()
        else:
            name = f"{module_info.name} {dtype_name(dtype)}"
            count, fraction = _Margin.inexact.get(name, (0, 0.0))
            _Margin.inexact[name] = (count + 1, max(fraction, _Margin.sample))
    if failures:
        shown = "\n".join(failures[:5])
        more = f"\n... and {len(failures) - 5} more" if len(failures) > 5 else ""
        pytest.fail(
            f"{len(failures)} of {len(chosen)} sample(s) checked differ from CPU:\n{shown}{more}",
            pytrace=False,
        )
    if not chosen:
        pytest.skip("the ModuleInfo yields no eval-mode samples")
