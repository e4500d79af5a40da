"""OpInfo parity: PyTorch's own OpInfo samples (op_db) run on neuron and on CPU, compared.

For every OpInfo in torch.testing._internal.common_methods_invocations.op_db and each of float32
and bfloat16 that the OpInfo supports on CPU, each sample of ``op.sample_inputs("cpu", dtype)`` is
copied to neuron and the op runs on both devices. The copy keeps sizes, strides, storage offsets
and storage sharing between arguments, so neuron kernels see exactly the layouts CPU's do.

- test_forward: the outputs (after the sample's output_process_fn_grad) and the sample's own
  tensors after the call (an op may write into its arguments) must match CPU's. Where CPU raises,
  neuron must raise an exception of the same type.
- test_backward (OpInfos that support autograd): ``torch.autograd.grad`` of the differentiable
  floating outputs, with a random cotangent that is the same on both devices, with respect to
  every sample tensor that requires grad, must match CPU's gradients.

Tolerances are torch.testing.assert_close's defaults for the compared tensor's dtype (float32:
rtol 1.3e-6, atol 1e-5; bfloat16: rtol 1.6e-2, atol 1e-5): neuron computes with the same math as
CPU, so anything looser would hide real differences.

Values that cannot be compared are not. A sample's values count as random when, on CPU, the op
runs an ATen op tagged ``nondeterministic_seeded`` (dropout, sampling, random factories, ...) or
gives another result under another seed; an OpInfo flagged ``has_nondeterministic_output``
returns uninitialised memory (empty, new_empty, ...). For those only types, shapes, dtypes and
devices are compared, and a test that compared nothing else is reported as skipped, saying so.

By default (``make test``) a deterministic subset runs: every OpInfo, the first
``TORCH_NEURONX_OPINFO_SAMPLES`` samples, float32 forward and backward, bfloat16 forward.
``TORCH_NEURONX_OPINFO=full`` (``make opinfo``) runs every sample of both dtypes, forward and
backward. Known failures live in known_failures.py, nowhere else; they are strict xfails and run
every sample in the subset too. See docs/opinfo.md.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import zlib

import pytest
import torch

from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import TorchDispatchMode

from parity import WARNING_FILTERS, Mismatch, both_raised, dtype_name, first_line

from .known_failures import KNOWN_FAILURES

DEVICE = "neuron"
FULL = os.environ.get("TORCH_NEURONX_OPINFO", "").lower() == "full"
SUBSET_SAMPLES = int(os.environ.get("TORCH_NEURONX_OPINFO_SAMPLES", "10"))
DTYPES = (torch.float32, torch.bfloat16)
SEED = 1234  # both devices run each sample right after torch.manual_seed(SEED)

# Tensor arguments an op requires on the host whatever the device of its input, as CUDA does
# (op name -> positions in sample.args). They stay on CPU in the neuron run.
HOST_ARGUMENTS = {
    "tensor_split": {0},  # tensor_indices_or_sections must be a CPU tensor
}

pytestmark = WARNING_FILTERS


def _cases(phase: str):
    for op in op_db:
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype not in supported:
                continue
            if phase == "backward" and not op.supports_autograd:
                continue
            if phase == "backward" and not FULL and dtype != torch.float32:
                continue
            variant = f".{op.variant_test_name}" if op.variant_test_name else ""
            marks = []
            reason = KNOWN_FAILURES.get(_key(op, dtype, phase))
            if reason is not None:
                # Strict: a known failure that passes fails the run, so the list stays honest.
                # (The subset runs every sample of these: it must not stop before the failure.)
                marks.append(pytest.mark.xfail(reason=reason, strict=True))
            test_id = f"{op.name}{variant}-{dtype_name(dtype)}"
            yield pytest.param(op, dtype, id=test_id, marks=marks)


def _key(op, dtype: torch.dtype, phase: str) -> tuple[str, str, str, str]:
    return (op.name, op.variant_test_name, dtype_name(dtype), phase)


# ---------------------------------------------------------------------------------------------
# Copying samples


class _Copier:
    """Copies the tensors of a sample's input/args/kwargs to `device`.

    A tensor's whole storage is copied once and the tensor becomes a view of the copy with the
    same sizes, strides and offset, so non-contiguous and overlapping (expanded) inputs stay so
    and tensors sharing storage keep sharing it. A CPU device argument becomes `device`."""

    def __init__(self, device: str):
        self.device = device
        self._storages: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}
        self._tensors: dict[int, torch.Tensor] = {}
        self.copied = False  # whether the sample had anything to put on `device`

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        self.copied = True
        if id(t) not in self._tensors:
            with torch.no_grad():
                if t.layout != torch.strided or t.is_quantized or t.is_conj() or t.is_neg():
                    copy = t.to(self.device, copy=True)
                else:
                    copy = self._strided(t)
            if t.requires_grad:
                copy = copy.detach().requires_grad_(True)
            self._tensors[id(t)] = copy
        return self._tensors[id(t)]

    def _strided(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes(), t.dtype)
        if key not in self._storages:
            flat = torch.empty(0, dtype=t.dtype, device=t.device)
            flat.set_(storage, 0, (storage.nbytes() // t.element_size(),), (1,))
            self._storages[key] = flat.to(self.device, copy=True)
        return self._storages[key].as_strided(t.size(), t.stride(), t.storage_offset())

    def __call__(self, value, device_argument: bool = False):
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
            copies = [self(v, device_argument) for v in value]
            if isinstance(value, list):
                return copies
            return type(value)(*copies) if hasattr(value, "_fields") else tuple(copies)
        if isinstance(value, dict):
            return {k: self(v, device_argument=(k == "device")) for k, v in value.items()}
        is_cpu = (isinstance(value, torch.device) and value.type == "cpu") or (
            device_argument and value == "cpu"
        )
        if not is_cpu:
            return value
        self.copied = True
        return torch.device(self.device)


def _copy_sample(op, sample, device: str):
    """The sample with its tensors copied to `device`, and the copier (which maps a CPU tensor of
    the sample to its copy)."""
    copier = _Copier(device)
    copy = sample.transform(lambda t: t)  # same metadata; the fields are replaced below
    copy.input = copier(sample.input)
    # A positional "cpu" is a device argument (Tensor.to("cpu", ...)).
    copy.args = tuple(
        copier(a, device_argument=True) if isinstance(a, str) else copier(a) for a in sample.args
    )
    copy.kwargs = copier(sample.kwargs)
    if device != "cpu" and op.name in HOST_ARGUMENTS:
        copy.args = tuple(
            sample.args[i] if i in HOST_ARGUMENTS[op.name] else a for i, a in enumerate(copy.args)
        )
    return copy, copier


def _tensors(value):
    """The tensors in a nested structure, in order."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _arguments(sample):
    return (sample.input, sample.args, sample.kwargs)


def _describe(sample) -> str:
    try:
        text = sample.summary()
    except Exception:  # noqa: BLE001 - only a description
        text = repr(sample)
    return text if len(text) <= 300 else text[:300] + "..."


def _run(op, sample, seed: int = SEED):
    """(processed output, None) or (None, the exception raised)."""
    torch.manual_seed(seed)
    try:
        return sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs)), None
    except Exception as error:  # noqa: BLE001 - whatever CPU raises, neuron must raise too
        return None, error


# ---------------------------------------------------------------------------------------------
# Comparison


def _values_are_random(op, pristine, expected) -> bool:
    """Whether this sample's values may differ between two correct runs: the OpInfo returns
    uninitialised memory, or the op draws random numbers. It draws them when CPU's own result
    changes with the seed or CPU runs an ATen op tagged nondeterministic_seeded (bernoulli,
    native_dropout, rand, normal_, ...). `pristine` holds two untouched CPU copies of the sample,
    `expected` is CPU's result under SEED."""
    if op.has_nondeterministic_output:
        return True
    # The grad mode is the run's: some ops take another path without grad.
    with _reseeded(SEED + 1):
        other, error = _run(op, pristine[0], seed=SEED + 1)
    if error is None and not _identical(other, expected):
        return True
    # A separate run: under a dispatch mode some composites decompose differently (other values).
    watch = _WatchRng()
    with watch:
        _run(op, pristine[1])
    return watch.seeded


class _WatchRng(TorchDispatchMode):
    """Notes whether any ATen op that draws from a generator runs."""

    seeded = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.seeded = True
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _reseeded(seed: int):
    """torch.manual_seed seeds `seed` whatever it is asked for. OpInfos of random ops reseed
    inside the op (torch.testing._utils.wrapper_set_seed: torch.manual_seed(42)), which would make
    every run alike; this is how a second run gets other random numbers."""
    manual_seed = torch.manual_seed
    torch.manual_seed = lambda _: manual_seed(seed)
    try:
        yield
    finally:
        torch.manual_seed = manual_seed


def _identical(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
            return False
        if a.layout != torch.strided:
            a, b = a.to_dense(), b.to_dense()
        a, b = a.detach(), b.detach()
        if a.dtype.is_floating_point or a.dtype.is_complex:
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _compare(actual, expected, where: str, values: bool = True, device: bool = True) -> None:
    """Raises Mismatch where neuron's `actual` differs from CPU's `expected`: structure, types,
    shapes, dtypes, (with `device`) a CPU tensor's counterpart being on neuron, and (with
    `values`) the values."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch(f"{where}: CPU returned a tensor, neuron {type(actual).__name__}")
        if device and expected.device.type == "cpu" and actual.device.type != DEVICE:
            raise Mismatch(f"{where}: the result is on {actual.device}, expected {DEVICE}")
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            raise Mismatch(
                f"{where}: neuron {actual.dtype}{list(actual.shape)} vs "
                f"CPU {expected.dtype}{list(expected.shape)}"
            )
        if actual.layout != expected.layout:
            raise Mismatch(f"{where}: neuron layout {actual.layout} vs CPU {expected.layout}")
        if values:
            actual_cpu, expected_cpu = actual.detach().to("cpu"), expected.detach()
            if expected_cpu.layout != torch.strided:
                actual_cpu, expected_cpu = actual_cpu.to_dense(), expected_cpu.to_dense()
            try:
                torch.testing.assert_close(actual_cpu, expected_cpu, equal_nan=True)
            except AssertionError as error:
                raise Mismatch(f"{where}: {error}") from None
        return
    if isinstance(expected, (list, tuple)) and not isinstance(expected, torch.Size):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch(f"{where}: neuron returned {actual!r:.200}, CPU {expected!r:.200}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{where}[{i}]", values, device)
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or actual.keys() != expected.keys():
            raise Mismatch(f"{where}: neuron returned {actual!r:.200}, CPU {expected!r:.200}")
        for k in expected:
            _compare(actual[k], expected[k], f"{where}[{k!r}]", values, device)
        return
    if isinstance(expected, torch.device):
        return  # the device a result lives on, which differs by construction
    if isinstance(expected, (int, float, complex)) and not isinstance(expected, bool):
        if type(actual) is not type(expected):
            raise Mismatch(f"{where}: neuron {actual!r} vs CPU {expected!r}")
        if values:
            try:
                torch.testing.assert_close(actual, expected, equal_nan=True)
            except AssertionError as error:
                raise Mismatch(f"{where}: {error}") from None
        return
    if actual != expected:
        raise Mismatch(f"{where}: neuron {actual!r:.200} vs CPU {expected!r:.200}")


# ---------------------------------------------------------------------------------------------
# The tests


class _Tally:
    """What one test's samples did; the session totals go into the summary (conftest.py)."""

    totals: dict[str, int] = {}

    def __init__(self):
        self.counts: dict[str, int] = {}

    def add(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        _Tally.totals[what] = _Tally.totals.get(what, 0) + 1


@pytest.fixture(scope="module", autouse=True)
def _report_totals(request):
    request.config._neuron_opinfo_totals = _Tally.totals
    yield


def _samples(op, dtype: torch.dtype, phase: str):
    samples = op.sample_inputs("cpu", dtype, requires_grad=phase == "backward")
    if FULL or _key(op, dtype, phase) in KNOWN_FAILURES:
        return enumerate(samples)
    return enumerate(itertools.islice(samples, SUBSET_SAMPLES))


def _finish(failures: list[str], tally: _Tally, phase: str) -> None:
    if failures:
        shown = "\n".join(failures[:5])
        more = f"\n... and {len(failures) - 5} more" if len(failures) > 5 else ""
        pytest.fail(f"{len(failures)} sample(s) differ from CPU:\n{shown}{more}", pytrace=False)
    counts = tally.counts
    if not counts:
        pytest.skip("the OpInfo yields no samples for this dtype")
    if counts.get(f"{phase} values compared") or counts.get(f"{phase} raised on both"):
        return
    if counts.get(f"{phase} random values, shapes compared"):
        pytest.skip(
            "values depend on the RNG or are uninitialised memory: compared types, shapes, "
            "dtypes and devices only"
        )
    pytest.skip("no sample has a differentiable output of an input that requires grad")


@pytest.mark.parametrize("op,dtype", list(_cases("forward")))
def test_forward(op, dtype):
    tally, failures = _Tally(), []
    for index, sample in _samples(op, dtype, "forward"):
        where = f"sample {index} {_describe(sample)}"
        try:
            neuron_sample, copier = _copy_sample(op, sample, DEVICE)
            pristine = [_copy_sample(op, sample, "cpu")[0] for _ in range(2)]
            expected, cpu_error = _run(op, sample)
            actual, neuron_error = _run(op, neuron_sample)
            if both_raised(cpu_error, neuron_error, where):
                tally.add("forward raised on both")
                continue
            values = not _values_are_random(op, pristine, expected)
            # A factory sample without tensors or a device (torch.arange(3)) makes CPU tensors.
            _compare(actual, expected, f"{where} output", values, device=copier.copied)
            _compare(
                list(_tensors(_arguments(neuron_sample))),
                list(_tensors(_arguments(sample))),
                f"{where} argument tensors after the call",
                values,
                device=False,  # HOST_ARGUMENTS stay on CPU
            )
            tally.add(
                "forward values compared" if values else "forward random values, shapes compared"
            )
        except Mismatch as error:
            failures.append(str(error))
    _finish(failures, tally, "forward")


def _differentiable(outputs) -> list[torch.Tensor]:
    return [
        t
        for t in _tensors(outputs)
        if t.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex)
    ]


@pytest.mark.parametrize("op,dtype", list(_cases("backward")))
def test_backward(op, dtype):
    tally, failures = _Tally(), []
    for index, sample in _samples(op, dtype, "backward"):
        where = f"sample {index} {_describe(sample)}"
        try:
            neuron_sample, copier = _copy_sample(op, sample, DEVICE)
            pristine = [_copy_sample(op, sample, "cpu")[0] for _ in range(2)]
            # Every distinct sample tensor that requires grad, and its neuron copy.
            inputs = {id(t): t for t in _tensors(_arguments(sample)) if t.requires_grad}
            cpu_inputs = list(inputs.values())
            neuron_inputs = [copier.tensor(t) for t in cpu_inputs]
            if not cpu_inputs:
                tally.add("backward no input requires grad")
                continue

            cpu_out, cpu_error = _run(op, sample)
            neuron_out, neuron_error = _run(op, neuron_sample)
            if both_raised(cpu_error, neuron_error, f"{where} forward"):
                tally.add("backward raised on both")
                continue
            cpu_diff, neuron_diff = _differentiable(cpu_out), _differentiable(neuron_out)
            if len(cpu_diff) != len(neuron_diff):
                raise Mismatch(
                    f"{where}: {len(neuron_diff)} differentiable outputs on neuron, "
                    f"{len(cpu_diff)} on CPU"
                )
            if not cpu_diff:
                tally.add("backward no differentiable output")
                continue
            seed = zlib.crc32(f"{op.name}.{op.variant_test_name}/{dtype}/{index}".encode())
            generator = torch.Generator().manual_seed(seed)
            cotangents = [
                torch.randn(t.shape, generator=generator, dtype=t.dtype) for t in cpu_diff
            ]

            def grad(outputs, inputs, cotangents):
                try:
                    return torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True), None
                except Exception as error:  # noqa: BLE001 - as in _run
                    return None, error

            expected, cpu_error = grad(cpu_diff, cpu_inputs, cotangents)
            actual, neuron_error = grad(
                neuron_diff, neuron_inputs, [g.to(DEVICE) for g in cotangents]
            )
            if both_raised(cpu_error, neuron_error, f"{where} backward"):
                tally.add("backward raised on both")
                continue
            values = not _values_are_random(op, pristine, cpu_out)
            _compare(list(actual), list(expected), f"{where} gradient", values)
            tally.add(
                "backward values compared" if values else "backward random values, shapes compared"
            )
        except Mismatch as error:
            failures.append(str(error))
    _finish(failures, tally, "backward")
