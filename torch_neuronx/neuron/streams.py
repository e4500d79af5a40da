"""Streams and events on neuron: thin subclasses of the device-generic torch.Stream/torch.Event,
which reach the device through the backend's DeviceGuard. nrtsim runs each stream in order,
host-synchronously: work has completed when the call that queued it returns."""

from typing import Optional

import torch

from torch_neuronx import _C
from torch_neuronx.neuron._device import (
    _check_device_index,
    _device_index,
    _lazy_init,
    current_device,
)

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
]


class Stream(torch.Stream):
    """An in-order queue of work on one neuron device.

    ``Stream(device=None, priority=0)``: priority 0 is normal, a negative priority takes a stream
    from the high-priority pool.
    """

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        _lazy_init()
        if "stream_id" in kwargs:  # wrapping an existing stream
            return super().__new__(cls, **kwargs)
        index = _check_device_index(_device_index(device), RuntimeError)
        return super().__new__(cls, device=torch.device("neuron", index), priority=priority)

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.device_index, self.stream_id)

    def wait_event(self, event) -> None:
        event.wait(self)

    def wait_stream(self, stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        if event is None:
            event = Event()
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<torch.neuron.Stream device=neuron:{self.device_index} stream_id={self.stream_id}>"


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


class Event(torch.Event):
    """A marker in a stream's order; with ``enable_timing=True`` it measures elapsed time."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise NotImplementedError(
                "interprocess neuron events are not supported: nrtsim has no IPC handles; share "
                "tensors between processes through torch.distributed instead"
            )
        event = super().__new__(
            cls, device=torch.device("neuron", current_device()), enable_timing=enable_timing,
            blocking=blocking,
        )
        # torch.Event does not expose its flags; kept for __repr__ and for callers that check.
        event.enable_timing = enable_timing
        return event

    def record(self, stream: Optional[torch.Stream] = None) -> None:
        super().record(current_stream() if stream is None else stream)

    def wait(self, stream: Optional[torch.Stream] = None) -> None:
        super().wait(current_stream() if stream is None else stream)

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds from this event to `end_event` on the simulated Trainium clock: the time
        the work between them would take on a NeuronCore, as the engine model says. Both events
        need enable_timing=True. :meth:`host_elapsed_time` gives the host's wall time."""
        # torch.Event.elapsed_time accepts only an exact torch.Event as the end event (it compares
        # the Python type, not isinstance), so it would reject this subclass.
        return _C._event_elapsed_time(self, end_event)

    def host_elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds of host wall time from this event to `end_event` (what the simulator
        itself took to get from one to the other)."""
        return _C._event_host_elapsed_time(self, end_event)

    def __repr__(self) -> str:
        return f"<torch.neuron.Event {'timing' if self.enable_timing else 'no timing'}>"


def current_stream(device=None) -> Stream:
    """The calling thread's current stream on `device` (default: the current device)."""
    _lazy_init()
    index = _check_device_index(_device_index(device), RuntimeError)
    return _wrap(torch._C._accelerator_getStream(index))


def default_stream(device=None) -> Stream:
    current = current_stream(device)
    return Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make `stream` the current stream of its device, and that device the current device, for
    the calling thread (as torch.cuda.set_stream does)."""
    if stream is None:
        return
    _lazy_init()
    torch._C._accelerator_setStream(stream)
    if stream.device_index != current_device():
        _C._set_device(stream.device_index)


class StreamContext:
    """Context manager that makes `stream` current (and its device current) inside the block."""

    def __init__(self, stream: Optional[torch.Stream]):
        self.stream = stream
        self.prev_stream = None
        self.prev_device = -1

    def __enter__(self):
        if self.stream is None:
            return self
        self.prev_device = current_device()
        self.prev_stream = current_stream(self.stream.device_index)
        if self.stream.device_index != self.prev_device:
            self.prev_device_stream = current_stream(self.prev_device)
        set_stream(self.stream)
        return self

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        set_stream(self.prev_stream)
        if self.stream.device_index != self.prev_device:
            set_stream(self.prev_device_stream)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    return StreamContext(stream)
