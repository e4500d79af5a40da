"""Which ATen ops ran on neuron natively and which went to the CPU fallback."""

from torch_neuronx import _C


def get_fallback_ops() -> list:
    """Names (``aten::name.overload``) of the ops that ran through the CPU fallback, in first-seen
    order, since the start or the last :func:`clear_op_tracking`."""
    return list(_C._get_fallback_ops())


def get_executed_ops() -> list:
    """Names of every ATen op executed on neuron, native kernels and CPU fallbacks alike, in the
    order each first ran."""
    return list(_C._get_executed_ops())


def clear_op_tracking() -> None:
    """Forget the executed and fallback ops recorded so far (the fallback warnings stay once per
    op and process; the kernel trace is not affected)."""
    _C._clear_op_tracking()


def kernel_trace() -> list:
    """Per-op totals of every launch record since the start or :func:`clear_kernel_trace`: the
    kind of launch (kernel, copy direction, scalar read, resize, host fallback, ...), launches,
    work per engine (``ops``: FLOPs on the Tensor engine, elements on the others; ``flops`` is the
    Tensor engine's), bytes read and written (in total, and per engine as ``engine_bytes``:
    ``{engine: (read, written)}``), the engine it mainly occupies, the host time the simulator
    spent (``host_ns``) and the modelled Trainium time (``sim_ns``)."""
    return list(_C._kernel_trace())


def clear_kernel_trace() -> None:
    """Forget the kernel trace's totals (op tracking is separate: :func:`clear_op_tracking`)."""
    _C._clear_kernel_trace()
