"""What the fuzzer knows about before it runs.

KNOWN: failures whose fix is under way elsewhere. Each entry recognises its failure from the call
and the mismatch and names where it is fixed; the fuzzer counts a match in its summary instead of
failing, until the fix lands (then the entry goes, with its strict xfail in test_regressions.py).

DEVICE_PATH_STRIDES: ops whose CPU composite takes a path only the CPU has, so the CPU's result
strides are not the ones any other device gives; their values are compared, their strides not."""

from __future__ import annotations

# i27-core fixes these at their root (issue 27 items 1 and 2).
OVERLAP = ("partly overlapping out=/in-place operands are not refused (issue 27: memory-overlap "
           "checks, i27-core)")
CHANNELS_LAST_BINARY = ("binary ops on two 4-D channels-last operands mislabel their result's "
                        "layout (issue 27 item 1, i27-core)")
MODE_OUT = "torch.mode(..., out=) refuses the neuron device (issue 27, i27-core)"
MEMORY_FORMAT = ("an explicit memory_format=channels_last(_3d) is refused on neuron (issue 27 "
                 "item 2: compute every memory format, i27-core)")


def _overlap(call, form, kind, message) -> bool:
    return kind in ("overlaps input", "other overlaps self") and "neuron did not" in message


def _mode_out(call, form, kind, message) -> bool:
    return call.op.name == "mode" and form == "out" and "mode only supports CPU" in message


def _memory_format(call, form, kind, message) -> bool:
    refused = "only support contiguous or preserve memory format" in message
    return refused and "neuron raised" in message


def _channels_last_binary(call, form, kind, message) -> bool:
    operands = [t for t in (call.input, *call.args) if hasattr(t, "dim")]
    laid = [t for t in operands if t.dim() == 4 and t.numel() > 1 and not t.is_contiguous()
            and t.is_contiguous(memory_format=__import__("torch").channels_last)]
    return len(laid) >= 2


KNOWN = [
    (_overlap, OVERLAP),
    (_mode_out, MODE_OUT),
    (_memory_format, MEMORY_FORMAT),
    (_channels_last_binary, CHANNELS_LAST_BINARY),
]

DEVICE_PATH_STRIDES = {
    # at::max_pool1d runs max_pool1d_impl on CPU tensors that need no grad, and
    # max_pool1d_with_indices (through max_pool2d_with_indices) on every other device, which
    # keeps a channels-last-like input's layout: CUDA's result has neuron's strides.
    "nn.functional.max_pool1d": "CPU-only max_pool1d_impl path (CUDA gives neuron's strides)",
}


def match(call, form: str, kind: str, error) -> str | None:
    """The reason of the known failure `error` is, or None."""
    for recognise, reason in KNOWN:
        if recognise(call, form, kind, str(error)):
            return reason
    return None
