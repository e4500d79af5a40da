"""Which ATen ops ran on neuron natively and which went to the CPU fallback."""

from torch_neuronx import _C


def get_fallback_ops() -> list:
    """Names (``aten::name.overload``) of the ops that ran through the CPU fallback, in first-seen
    order, since the start or the last :func:`clear_op_tracking`."""
    return list(_C._get_fallback_ops())


def get_executed_ops() -> list:
    """Names of every ATen op executed on neuron: native kernels and CPU fallbacks alike, the
    native kernels first (in first-launch order), then the fallbacks (in first-seen order)."""
    return list(_C._get_executed_ops())


def clear_op_tracking() -> None:
    """Forget the executed and fallback ops recorded so far (the fallback warnings stay once per
    op and process)."""
    _C._clear_op_tracking()


def kernel_trace() -> list:
    """Per-op totals of the native kernels launched: launches, FLOPs, bytes moved, the engine the
    op runs on, and the host time the simulator spent on it."""
    return list(_C._kernel_trace())
