"""The layout and aliasing fuzzer: every op neuron runs natively, neuron against CPU.

One test per OpInfo whose calls reach a native neuron kernel (catalogue.py derives the list from
the dispatcher's registrations). Each test is a Hypothesis search: an example draws one call of
the op (calls.py: shapes with 0-d and zero-size ones, dtypes for type promotion, contiguous,
channels_last/channels_last_3d, permuted, strided and offset layouts, expanded operands, CPU
scalar operands, aliasing operands), then its form: functional, out= (right size in some layout,
wrong size to be resized with the warning, empty, another dtype, the input itself, a view partly
overlapping the input), in-place (self in any layout, an expanded self, another operand partly
overlapping self) or backward (the gradients of the floating outputs, with cotangents in any
layout, so the backward kernels see every layout too). check.py runs it on both devices and
compares errors, results, strides, dtypes, what was written into the arguments, and the resize
warning. About one example of every FUZZ_COMPILE_EVERY-th op also runs its functional call under
torch.compile(backend="neuron").

Budget (docs/fuzzing.md):
- ``make test``: FUZZ_EXAMPLES (default 2) examples per op, a fixed seed per op
  (FUZZ_SEED, default 0, mixed with the op's name), about one example of every
  FUZZ_COMPILE_EVERY-th op (default 80: seven ops) also compiled.
- ``make fuzz``: FUZZ_EXAMPLES=100 and every 4th op compiled; FUZZ_SEED=random draws a new seed
  (printed in the summary, so a failure can be replayed with FUZZ_SEED=<it>).

A failure prints the minimal call Hypothesis shrank it to (sizes, strides, offsets, layout names,
dtypes): each becomes an explicit test in test_regressions.py. Failures whose cause is already
being fixed elsewhere are matched by known.py and counted, not failed, until the fix lands.
"""

from __future__ import annotations

import itertools
import os
import zlib

import pytest
import torch
from torch.utils import _pytree as pytree
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

import torch_neuronx
from parity import WARNING_FILTERS, Mismatch

from . import known
from .calls import functional_call, inplace_call, out_call
from .catalogue import family, native_ops
from .catalogue import test_id as op_id
from .check import backward, check, compiled
from .layouts import layouts

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "2"))
SEED = os.environ.get("FUZZ_SEED", "0")
COMPILE_EVERY = int(os.environ.get("FUZZ_COMPILE_EVERY", "80"))
SAMPLES = 40  # an OpInfo's first samples, from which the samples family draws
if SEED == "random":
    SEED = str(int.from_bytes(os.urandom(4), "little"))

pytestmark = WARNING_FILTERS


class Tally:
    """What the examples did, for the session summary (conftest.py)."""

    counts: dict[str, int] = {}
    known: dict[str, int] = {}
    reached: set[str] = set()
    largest_margin: tuple[float, str] = (0.0, "")
    seed = SEED

    @classmethod
    def add(cls, what: str) -> None:
        cls.counts[what] = cls.counts.get(what, 0) + 1


_SAMPLES: dict = {}


def samples_of(op, dtype: torch.dtype) -> list:
    """An OpInfo's samples for `dtype`, generated once, from a seed fixed per op."""
    key = (op_id(op), dtype)
    if key not in _SAMPLES:
        torch.manual_seed(zlib.crc32(f"{key[0]}/{dtype}".encode()))
        try:
            _SAMPLES[key] = list(itertools.islice(op.sample_inputs("cpu", dtype), SAMPLES))
        except Exception:  # noqa: BLE001 - an OpInfo whose sample generator fails has none
            _SAMPLES[key] = []
    return _SAMPLES[key]


def _forms(op) -> list[str]:
    forms = ["functional", "functional"]
    if op.supports_out:
        forms.append("out")
    if op.inplace_variant is not None:
        forms.append("inplace")
    if op.supports_autograd:
        forms.append("backward")
    return forms


def _examine(op, data, compile_op: bool) -> None:
    call = data.draw(functional_call(op, samples_of), label="call")
    if call is None:
        Tally.add("no sample for the dtype drawn")
        return
    functional = call
    form = data.draw(st.sampled_from(_forms(op)), label="form")
    kind = "functional"
    if form == "out":
        expected = _cpu_result(call)
        drawn = data.draw(out_call(call, expected), label="out=") if expected is not None else None
        if drawn is None:
            form = "functional"
        else:
            kind, call = drawn
    elif form == "inplace":
        drawn = data.draw(inplace_call(call), label="in-place")
        if drawn is None:
            form = "functional"
        else:
            kind, call = drawn
    elif form == "backward":
        expected = _cpu_result(call)
        floating = [t for t in pytree.tree_leaves(expected)
                    if isinstance(t, torch.Tensor) and t.is_floating_point()]
        cotangent_layouts = [data.draw(layouts(tuple(t.shape)), label="cotangent layout")
                             for t in floating]
        kind = f"cotangents {cotangent_layouts}"
    note(f"repro: {call.describe()}  [{form}: {kind}]")
    try:
        if form == "backward":
            what, margin = backward(call, cotangent_layouts)
        else:
            what, margin = check(call, strides=op.name not in known.DEVICE_PATH_STRIDES)
        # About one example per compiled op, drawn (so that a replay compiles it again).
        if compile_op and data.draw(st.integers(0, EXAMPLES - 1), label="compile if 0") == 0:
            what = f"{what}; compiled functional call {compiled(functional)}"
    except Mismatch as error:
        reason = known.match(call, form, kind, error)
        if reason is None:
            raise
        Tally.known[reason] = Tally.known.get(reason, 0) + 1
        Tally.add("known failure (see known.py)")
        return
    Tally.add(f"{form}: {what}")
    if margin > Tally.largest_margin[0]:
        Tally.largest_margin = (margin, call.describe()[:300])


def _cpu_result(call):
    try:
        return call.run()
    except Exception:  # noqa: BLE001 - the out= form of a call CPU refuses is not drawn
        return None


@pytest.mark.parametrize("op", native_ops(), ids=op_id)
def test_fuzz(op):
    position = native_ops().index(op)
    compile_op = bool(COMPILE_EVERY) and position % COMPILE_EVERY == 0

    @seed(zlib.crc32(f"{op_id(op)}/{SEED}".encode()))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(data=st.data())
    def examples(data):
        _examine(op, data, compile_op)

    torch_neuronx.clear_op_tracking()
    try:
        examples()
    finally:
        Tally.reached.update(torch_neuronx.get_executed_ops())
        Tally.add(f"ops: {family(op)}")


def test_catalogue_covers_the_native_elementwise_ops():
    """The derived op list is not empty and reaches the kernels everybody uses (a guard against a
    catalogue that silently shrinks, e.g. when the dispatcher's API changes)."""
    names = {op.name for op in native_ops()}
    assert {"add", "mul", "div", "sum", "exp", "where", "nn.functional.conv2d"} <= names
    assert len(names) > 200, sorted(names)
