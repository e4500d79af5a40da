"""What the fuzzer knows about before it runs.

KNOWN: failures whose fix is under way elsewhere. Each entry recognises its failure from the call
and the mismatch and names where it is fixed; the fuzzer counts a match in its summary instead of
failing, until the fix lands (then the entry goes, with its strict xfail in test_regressions.py).

DEVICE_PATH_STRIDES: ops whose CPU composite takes a path only the CPU has, so the CPU's result
strides are not the ones any other device gives; their values are compared, their strides not."""

from __future__ import annotations

# (recognise(call, form, kind, message) -> bool, reason naming where it is fixed). Empty: the
# failures it held (partial-overlap checks, torch.mode's out=, channels-last binary ops, explicit
# channels-last memory formats) were fixed at their root by the i27-core work (issue 27).
KNOWN: list = []

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
