"""Streams and events on neuron: torch.neuron.Stream/Event, the device-generic torch.Stream and
torch.Event, current/default streams, the stream context, waits, timing, and that work queued on
side streams computes what the CPU computes."""

import time

import pytest
import torch

import torch_neuronx

pytestmark = pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")


@pytest.fixture(autouse=True)
def _default_streams():
    yield
    for i in range(torch.neuron.device_count()):
        torch.neuron.set_stream(torch.neuron.default_stream(i))
    torch.neuron.set_device(0)


def workload(n=192, repeat=4):
    """Some real device work, and the CPU's answer for it."""
    torch.manual_seed(0)
    a = torch.randn(n, n) / n**0.5
    x = a.to("neuron")
    y = x
    for _ in range(repeat):
        y = torch.tanh(y @ x)
    expected = a
    for _ in range(repeat):
        expected = torch.tanh(expected @ a)
    return y, expected


# --- streams ----------------------------------------------------------------------------------


def test_stream_priorities_and_pools():
    normal = torch.neuron.Stream()
    high = torch.neuron.Stream(priority=-1)
    assert normal.priority == 0
    assert high.priority == -1
    assert normal.device == torch.device("neuron:0")
    assert normal.stream_id != 0 and high.stream_id != 0  # never the default stream
    assert normal.stream_id != high.stream_id
    # Any negative priority takes the high-priority pool; streams are pooled (bounded ids).
    streams = [torch.neuron.Stream(priority=-5) for _ in range(40)]
    assert all(s.priority == -1 for s in streams)
    assert len({s.stream_id for s in streams}) <= 32
    assert torch.neuron.Stream(device=2).device == torch.device("neuron:2")
    assert torch.neuron.Stream(device="neuron:1").device_index == 1


def test_device_generic_torch_stream():
    s = torch.Stream(device="neuron")
    assert s.device == torch.device("neuron:0")
    assert s.stream_id != 0
    s1 = torch.Stream(device="neuron:1", priority=-1)
    assert s1.device_index == 1
    wrapped = torch.neuron.Stream(
        stream_id=s1.stream_id, device_index=1, device_type=s1.device_type
    )
    assert wrapped.priority == -1
    assert s.query()
    s.synchronize()


def test_current_and_default_stream():
    current = torch.neuron.current_stream()
    default = torch.neuron.default_stream()
    assert current == default
    assert default.stream_id == 0 and default.device_index == 0
    assert torch.accelerator.current_stream() == current
    assert torch_neuronx.current_stream() == current
    assert torch.neuron.current_stream(1).device_index == 1
    assert torch.neuron.default_stream("neuron:2").device == torch.device("neuron:2")
    assert torch.accelerator.current_stream(3).device_index == 3


def test_stream_context_sets_and_restores():
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
        assert torch.accelerator.current_stream() == s
        inner = torch.neuron.Stream(priority=-1)
        with torch_neuronx.stream(inner):
            assert torch.neuron.current_stream() == inner
        assert torch.neuron.current_stream() == s
    assert torch.neuron.current_stream() == torch.neuron.default_stream()

    with pytest.raises(KeyError):
        with torch.neuron.stream(s):
            raise KeyError
    assert torch.neuron.current_stream() == torch.neuron.default_stream()

    with torch.neuron.stream(None):  # no-op
        assert torch.neuron.current_stream() == torch.neuron.default_stream()


def test_stream_context_switches_to_the_streams_device():
    s1 = torch.neuron.Stream(device=1)
    assert torch.neuron.current_device() == 0
    with torch.neuron.stream(s1):
        assert torch.neuron.current_device() == 1
        assert torch.neuron.current_stream() == s1
        t = torch.ones(3, device="neuron")
        assert t.device == torch.device("neuron:1")
    assert torch.neuron.current_device() == 0
    assert torch.neuron.current_stream(1) == torch.neuron.default_stream(1)
    assert torch.neuron.current_stream(0) == torch.neuron.default_stream(0)


def test_torch_stream_as_context_manager():
    s = torch.Stream(device="neuron:2")
    with s:
        assert torch.accelerator.current_device_index() == 2
        assert torch.accelerator.current_stream() == s
    assert torch.accelerator.current_device_index() == 0
    assert torch.neuron.current_stream(2) == torch.neuron.default_stream(2)


def test_set_stream():
    s = torch.neuron.Stream()
    torch.neuron.set_stream(s)
    assert torch.neuron.current_stream() == s
    torch_neuronx.set_stream(torch.neuron.default_stream())
    assert torch.neuron.current_stream().stream_id == 0
    # A stream of another device: it becomes current there and its device becomes current.
    s3 = torch.neuron.Stream(device=3)
    torch.neuron.set_stream(s3)
    assert torch.neuron.current_device() == 3
    assert torch.neuron.current_stream() == s3
    assert torch.neuron.current_stream(0) == torch.neuron.default_stream(0)
    torch.accelerator.set_stream(torch.neuron.default_stream(0))
    assert torch.neuron.current_device() == 0


def test_current_stream_is_per_thread():
    import threading

    s = torch.neuron.Stream()
    seen = {}

    def worker():
        seen["start"] = torch.neuron.current_stream().stream_id
        torch.neuron.set_stream(torch.neuron.Stream(priority=-1))
        seen["set"] = torch.neuron.current_stream().priority

    with torch.neuron.stream(s):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert torch.neuron.current_stream() == s
    assert seen == {"start": 0, "set": -1}


def test_side_stream_results_match_cpu():
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        y, expected = workload()
    s.synchronize()
    torch.testing.assert_close(y.cpu(), expected, atol=1e-5, rtol=1e-4)


def test_side_stream_on_other_device_matches_cpu():
    torch.manual_seed(3)
    a = torch.randn(64, 32)
    b = torch.randn(32, 16)
    s = torch.neuron.Stream(device=2, priority=-1)
    with torch.neuron.stream(s):
        out = torch.relu(a.to("neuron") @ b.to("neuron")).sum(dim=0)
    assert out.device == torch.device("neuron:2")
    torch.neuron.synchronize(2)
    torch.testing.assert_close(out.cpu(), torch.relu(a @ b).sum(dim=0))


def test_producer_consumer_across_streams():
    producer = torch.neuron.Stream()
    consumer = torch.neuron.Stream()
    base = torch.arange(1000, dtype=torch.float32)
    with torch.neuron.stream(producer):
        x = base.to("neuron") * 2
        done = producer.record_event()
    consumer.wait_event(done)
    with torch.neuron.stream(consumer):
        y = x + 1
    torch.neuron.current_stream().wait_stream(consumer)
    assert torch.equal(y.cpu(), base * 2 + 1)


def test_wait_stream_and_record_event():
    s = torch.neuron.Stream()
    main = torch.neuron.current_stream()
    x = torch.full((256,), 3.0, device="neuron")
    s.wait_stream(main)
    with torch.neuron.stream(s):
        y = x * x
    e = s.record_event()
    assert isinstance(e, torch.neuron.Event) and isinstance(e, torch.Event)
    assert e.query()
    main.wait_event(e)
    main.wait_stream(s)
    assert torch.equal(y.cpu(), torch.full((256,), 9.0))
    assert s.query() and main.query()


def test_record_stream():
    s = torch.neuron.Stream()
    x = torch.arange(64.0, device="neuron")
    x.record_stream(s)
    x.record_stream(torch.Stream(device="neuron"))
    with torch.neuron.stream(s):
        y = x + 1
    assert torch.equal(y.cpu(), torch.arange(64.0) + 1)
    with pytest.raises(RuntimeError, match="neuron stream"):
        x.record_stream(torch.Stream(device="cpu"))


# --- events -----------------------------------------------------------------------------------


def test_event_elapsed_time_is_positive_and_bounded():
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    y, expected = workload(n=256, repeat=6)
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1000
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float)
    assert 0 < elapsed <= wall_ms + 1.0
    torch.testing.assert_close(y.cpu(), expected, atol=1e-5, rtol=1e-4)


def test_event_elapsed_time_on_side_stream_and_with_torch_event():
    s = torch.neuron.Stream()
    start = torch.neuron.Event(enable_timing=True)
    end = torch.Event(device="neuron", enable_timing=True)
    start.record(s)
    with torch.neuron.stream(s):
        workload()
    end.record(s)
    assert start.elapsed_time(end) > 0
    # (The reverse, torch.Event.elapsed_time(torch.neuron.Event), is refused by torch itself, as
    # torch.Event and torch.cuda.Event cannot be paired either.)
    later = torch.neuron.Event(enable_timing=True)
    later.record(s)
    assert later.elapsed_time(start) < 0  # measured backwards


def test_elapsed_time_errors():
    a = torch.neuron.Event(enable_timing=True)
    b = torch.neuron.Event(enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        a.elapsed_time(b)
    untimed = torch.neuron.Event()
    a.record()
    untimed.record()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(untimed)
    with pytest.raises(RuntimeError, match="torch.Event"):
        a.elapsed_time(3)


def test_event_query_synchronize_wait():
    e = torch.neuron.Event()
    assert e.query()  # never recorded: complete, as in CUDA
    e.synchronize()
    x = torch.ones(128, device="neuron")
    y = x * 5
    e.record()
    e.synchronize()
    assert e.query()
    s = torch.neuron.Stream()
    e.wait(s)
    s.wait_event(e)
    with torch.neuron.stream(s):
        z = y - 1
    assert torch.equal(z.cpu(), torch.full((128,), 4.0))
    assert repr(e) == "<torch.neuron.Event no timing>"
    assert repr(torch.neuron.Event(enable_timing=True)) == "<torch.neuron.Event timing>"


def test_event_on_stream_of_another_device():
    s1 = torch.neuron.Stream(device=1)
    e = torch.neuron.Event()
    with torch.neuron.stream(s1):
        x = torch.arange(10.0, device="neuron") * 3
    e.record(s1)
    assert e.query()
    torch.neuron.current_stream().wait_event(e)  # neuron:0 waits for neuron:1
    assert torch.equal(x.to("neuron:0").cpu(), torch.arange(10.0) * 3)


def test_device_generic_torch_event():
    e = torch.Event(device="neuron")
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        x = torch.arange(5.0, device="neuron") + 2
    e.record(s)
    e.wait(torch.neuron.current_stream())
    e.synchronize()
    assert e.query()
    assert torch.equal(x.cpu(), torch.arange(5.0) + 2)


def test_interprocess_event_is_refused():
    with pytest.raises(NotImplementedError, match="interprocess"):
        torch.neuron.Event(interprocess=True)
