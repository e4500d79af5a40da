"""torch.profiler on neuron: device events from launch records on the simulated clock, correlated to
their CPU ops; key_averages device time; the Chrome trace's per-core, per-engine tracks;
record_function ranges; the legacy profiler; torch_neuronx.NeuronProfiler.

Expectations are exact where the record defines them (FLOPs, bytes, engine, names, the simulated
duration up to the profiler's whole-nanosecond time base) and never depend on host timing."""

import json
import math
import time
import warnings
from decimal import Decimal

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

import torch_neuronx
from torch_neuronx import _C
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
M, K, N = 64, 32, 16


def device_events(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1 and not e.is_user_annotation]


def cpu_events(prof, name):
    return [e for e in prof.events() if e.device_type == DeviceType.CPU and e.name == name]


def sim_ns_of(op):
    rows = [r for r in torch_neuronx.kernel_trace() if r["op"] == op]
    assert len(rows) == 1 and rows[0]["launches"] == 1, rows
    return rows[0]["sim_ns"]


def load_trace(path):
    # Decimal keeps Kineto's microsecond values with their three decimals exact (whole ns).
    with open(path) as f:
        return json.load(f, parse_float=Decimal)


def ns(us):
    return int(Decimal(us) * 1000)


@pytest.fixture
def operands():
    a_cpu = torch.randn(M, K)
    b_cpu = torch.randn(K, N)
    return a_cpu, b_cpu, a_cpu.to("neuron"), b_cpu.to("neuron")


def profile_mm(a, b):
    torch_neuronx.clear_kernel_trace()
    with profile(activities=ACTIVITIES) as prof:
        c = torch.mm(a, b)
    return prof, c


def test_mm_is_a_device_event_with_the_records_duration(operands):
    a_cpu, b_cpu, a, b = operands
    prof, c = profile_mm(a, b)
    torch.testing.assert_close(c.cpu(), a_cpu @ b_cpu)
    (event,) = [e for e in device_events(prof) if e.name == "aten::mm [tensor]"]
    assert event.device_index == a.device.index
    # Kineto's time base is whole nanoseconds; both ends of the simulated interval are rounded.
    duration_ns = (event.time_range.end - event.time_range.start) * 1000
    assert abs(duration_ns - sim_ns_of("aten::mm")) <= 1.0 + 1e-6


def test_mm_device_event_links_to_its_cpu_op(operands):
    _, _, a, b = operands
    prof, _ = profile_mm(a, b)
    (cpu_mm,) = cpu_events(prof, "aten::mm")
    (device_mm,) = [e for e in device_events(prof) if e.name == "aten::mm [tensor]"]
    assert device_mm.linked_correlation_id == cpu_mm.id != 0
    assert [k.name for k in cpu_mm.kernels] == ["aten::mm [tensor]"]
    assert cpu_mm.kernels[0].duration == pytest.approx(device_mm.time_range.elapsed_us())


def test_key_averages_device_time(operands):
    _, _, a, b = operands
    x = torch.randn(16)
    torch_neuronx.clear_kernel_trace()
    with profile(activities=ACTIVITIES) as prof:
        torch.mm(a, b)
        x.add(1)  # CPU only
    rows = {(r.key, r.device_type): r for r in prof.key_averages()}
    mm = rows[("aten::mm", DeviceType.CPU)]
    assert mm.self_device_time_total > 0
    assert mm.self_device_time_total * 1000 == pytest.approx(sim_ns_of("aten::mm"), abs=1.0)
    assert rows[("aten::add", DeviceType.CPU)].self_device_time_total == 0
    assert rows[("aten::add", DeviceType.CPU)].device_time_total == 0


def test_copies_show_their_direction():
    x = torch.arange(12.0).reshape(3, 4)
    with profile(activities=ACTIVITIES) as prof:
        y = x.to("neuron")
        z = y.clone()
        w = z.cpu()
        s = y.sum().item()
    torch.testing.assert_close(w, x)
    assert s == x.sum().item()
    names = [e.name for e in sorted(device_events(prof), key=lambda e: e.time_range.start)]
    assert names == [
        "Memcpy HtoD (aten::_copy_from)",
        "Memcpy DtoD (aten::_copy_from)",
        "Memcpy DtoH (aten::_copy_from)",
        "aten::sum.dim_IntList [vector]",
        "Scalar read DtoH (aten::_local_scalar_dense)",
    ]
    # Each copy is correlated to the aten::_copy_from that made it.
    copy_ids = {e.id for e in cpu_events(prof, "aten::_copy_from")}
    for e in device_events(prof):
        if e.name.startswith("Memcpy"):
            assert e.linked_correlation_id in copy_ids


def test_chrome_trace_tracks_and_contents(operands, tmp_path):
    _, _, a, b = operands
    torch_neuronx.clear_kernel_trace()
    with profile(activities=ACTIVITIES) as prof:
        c = torch.mm(a, b)
        d = torch.relu(c)
        e = d.cpu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = load_trace(path)
    events = trace["traceEvents"]
    device = a.device.index
    kernels = [ev for ev in events if ev.get("ph") == "X" and ev.get("cat") in ("kernel", "gpu_memcpy")]
    assert [ev["name"] for ev in kernels] == [
        "aten::mm [tensor]", "aten::relu [vector]", "Memcpy DtoH (aten::_copy_from)"]
    assert all(ev["pid"] == device for ev in kernels)

    meta = {(ev["name"], ev["pid"], ev["tid"]): ev["args"] for ev in events if ev.get("ph") == "M"}
    assert meta[("process_name", device, 0)]["name"] == f"neuron:{device}"
    engines = {ev["name"]: meta[("thread_name", device, ev["tid"])]["name"] for ev in kernels}
    assert engines == {
        "aten::mm [tensor]": "tensor engine",
        "aten::relu [vector]": "vector engine",
        "Memcpy DtoH (aten::_copy_from)": "dma engine",
    }

    mm = kernels[0]["args"]
    assert mm["flops"] == 2 * M * N * K
    assert mm["engine"] == "tensor" and mm["kind"] == "kernel" and mm["stream"] == 0
    assert mm["bytes_read"] == (M * K + K * N) * 4 and mm["bytes_written"] == M * N * 4
    assert mm["precision"] == "fp32"
    assert float(mm["sim_duration_ns"]) == pytest.approx(sim_ns_of("aten::mm"), rel=1e-12)
    assert abs(ns(kernels[0]["dur"]) - sim_ns_of("aten::mm")) <= 1
    assert mm["host_duration_ns"] > 0

    # One stream: the device runs its launches in order, each after the previous one ended.
    for prev, nxt in zip(kernels, kernels[1:]):
        assert ns(nxt["ts"]) >= ns(prev["ts"]) + ns(prev["dur"])
    # A device event starts no earlier than the CPU op that launched it.
    cpu_mm = [ev for ev in events if ev.get("cat") == "cpu_op" and ev["name"] == "aten::mm"]
    assert ns(kernels[0]["ts"]) >= ns(cpu_mm[0]["ts"])
    assert kernels[0]["args"]["External id"] == cpu_mm[0]["args"]["External id"]

    # Host-side runtime events start an arrow that ends on each device event.
    flows = [ev for ev in events if ev.get("cat") == "ac2g"]
    assert sorted(ev["ph"] for ev in flows) == ["f", "f", "f", "s", "s", "s"]
    runtime = [ev["name"] for ev in events if ev.get("cat") == "privateuse1_runtime"]
    assert runtime == ["nrtsim::kernel", "nrtsim::kernel", "nrtsim::copy_device_to_host"]


def test_record_function_range_on_cpu_and_device(operands, tmp_path):
    _, _, a, b = operands
    with profile(activities=ACTIVITIES) as prof:
        with record_function("my_range"):
            torch.mm(a, b)
    ranges = [e for e in prof.events() if e.name == "my_range"]
    assert {(e.device_type, e.is_user_annotation) for e in ranges} == {
        (DeviceType.CPU, True),
        (DeviceType.PrivateUse1, True),
    }
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = load_trace(path)["traceEvents"]
    (span,) = [ev for ev in events if ev.get("cat") == "gpu_user_annotation"]
    (mm,) = [ev for ev in events if ev.get("cat") == "kernel"]
    assert span["name"] == "my_range" and (span["pid"], span["tid"]) == (mm["pid"], mm["tid"])
    assert ns(span["ts"]) <= ns(mm["ts"]) and ns(span["ts"]) + ns(span["dur"]) >= ns(mm["ts"]) + ns(mm["dur"])


def _launch_device_us(prof, name):
    """The device time of the launches inside record_function range `name`: its CPU event's
    children's kernels."""
    (cpu_range,) = [e for e in prof.events() if e.name == name and e.device_type == DeviceType.CPU]
    return cpu_range.device_time_total


def test_range_device_time_is_its_launches_not_the_host_wall_time(operands):
    _, _, a, b = operands
    with profile(activities=ACTIVITIES) as prof:
        with record_function("gappy"):
            torch.mm(a, b)
            time.sleep(0.05)  # host time between launches: the device waits, it does not work
            torch.mm(a, b)
    launches = [e for e in device_events(prof) if e.name == "aten::mm [tensor]"]
    assert len(launches) == 2
    launched_us = sum(e.time_range.elapsed_us() for e in launches)
    rows = {(r.key, r.device_type, r.is_user_annotation): r for r in prof.key_averages()}
    device_range = rows[("gappy", DeviceType.PrivateUse1, True)]
    # Kineto keeps whole nanoseconds: each span end is rounded.
    assert device_range.device_time_total == pytest.approx(launched_us, abs=2e-3)
    assert device_range.device_time_total < 1000  # not the 50 ms the host slept
    assert _launch_device_us(prof, "gappy") == pytest.approx(launched_us, abs=2e-3)
    # No row's device time exceeds the table's total.
    total = sum(r.self_device_time_total for r in prof.key_averages() if not r.is_user_annotation)
    assert device_range.device_time_total <= total + 2e-3


def test_optimizer_step_reports_its_launches_device_time():
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 16).to("neuron")).sum().backward()
    with profile(activities=ACTIVITIES) as prof:
        opt.step()
    steps = [r for r in prof.key_averages()
             if r.key.startswith("Optimizer.step#AdamW.step") and r.device_type == DeviceType.PrivateUse1]
    assert len(steps) == 1
    launched_us = sum(e.time_range.elapsed_us() for e in device_events(prof))
    assert 0 < steps[0].device_time_total <= launched_us + 2e-3


def test_key_averages_has_one_row_per_name(operands):
    _, _, a, b = operands
    with profile(activities=ACTIVITIES) as prof:
        torch.relu(torch.mm(a, b))
    rows = prof.key_averages()
    names = [r.key for r in rows]
    assert len(names) == len(set(names)), sorted(names)
    by_name = {r.key: r for r in rows}
    # The op's row has its CPU time and its launches' device time; the launch has its own row.
    assert by_name["aten::mm"].cpu_time_total > 0 and by_name["aten::mm"].device_time_total > 0
    assert by_name["aten::mm [tensor]"].device_type == DeviceType.PrivateUse1
    assert by_name["aten::mm"].device_time_total == pytest.approx(
        by_name["aten::mm [tensor]"].device_time_total)


def test_second_device_is_its_own_process(tmp_path):
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two neuron devices")
    a = torch.randn(8, 8, device="neuron:1")
    with profile(activities=ACTIVITIES) as prof:
        torch.mm(a, a)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = load_trace(path)["traceEvents"]
    (mm,) = [ev for ev in events if ev.get("cat") == "kernel"]
    assert mm["pid"] == 1 and mm["args"]["device"] == 1
    names = {ev["pid"]: ev["args"]["name"] for ev in events if ev.get("name") == "process_name"}
    assert names[1] == "neuron:1"


def test_side_stream_gets_its_own_track(tmp_path):
    a = torch.randn(8, 8, device="neuron")
    s = torch.neuron.Stream()
    with profile(activities=ACTIVITIES) as prof:
        with torch.neuron.stream(s):
            torch.mm(a, a)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = load_trace(path)["traceEvents"]
    (mm,) = [ev for ev in events if ev.get("cat") == "kernel"]
    assert mm["args"]["stream"] == s.stream_id != 0
    thread = [ev for ev in events if ev.get("name") == "thread_name" and (ev["pid"], ev["tid"]) == (mm["pid"], mm["tid"])]
    assert thread[0]["args"]["name"] == f"tensor engine, stream {s.stream_id}"


def test_no_observer_remains_after_profiling(operands):
    _, _, a, b = operands
    before = _C._observer_count()
    with profile(activities=ACTIVITIES):
        assert _C._observer_count() == before + 1
        torch.mm(a, b)
    assert _C._observer_count() == before
    with pytest.raises(ValueError):
        with profile(activities=ACTIVITIES):
            raise ValueError("inside the profiler")
    assert _C._observer_count() == before


def test_cpu_only_profiling_observes_nothing(operands):
    _, _, a, b = operands
    before = _C._observer_count()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert _C._observer_count() == before
        torch.mm(a, b)
    assert device_events(prof) == []
    assert cpu_events(prof, "aten::mm")


@pytest.mark.parametrize("use_kineto", [False, True])
def test_legacy_profiler_shows_device_time(operands, use_kineto):
    _, _, a, b = operands
    x = torch.randn(16)
    torch_neuronx.clear_kernel_trace()
    with torch.autograd.profiler.profile(use_device="neuron", use_kineto=use_kineto) as prof:
        torch.mm(a, b)
        x.add(1)
    rows = {(r.key, r.device_type): r for r in prof.key_averages()}
    mm = rows[("aten::mm", DeviceType.CPU)]
    sim_us = sim_ns_of("aten::mm") / 1000
    if use_kineto:
        assert mm.self_device_time_total == pytest.approx(sim_us, abs=1e-3)
    else:
        # Marker mode: PyTorch keeps the time between two markers as whole microseconds.
        assert mm.self_device_time_total > 0
        assert abs(mm.self_device_time_total - sim_us) < 1.0
    assert rows[("aten::add", DeviceType.CPU)].self_device_time_total == 0


def test_neuron_profiler_context_manager_writes_the_trace(operands, tmp_path):
    a_cpu, b_cpu, a, b = operands
    with NeuronProfiler(NeuronConfig(profile_output_dir=str(tmp_path))) as prof:
        c = torch.mm(a, b)
    torch.testing.assert_close(c.cpu(), a_cpu @ b_cpu)
    assert prof.trace_path is not None and prof.trace_path.startswith(str(tmp_path))
    events = load_trace(prof.trace_path)["traceEvents"]
    (mm,) = [ev for ev in events if ev.get("cat") == "kernel"]
    assert mm["name"] == "aten::mm [tensor]" and mm["args"]["flops"] == 2 * M * N * K
    rows = {(r.key, r.device_type): r for r in prof.key_averages()}
    assert rows[("aten::mm", DeviceType.CPU)].self_device_time_total > 0
    assert torch_neuronx.NeuronProfiler is NeuronProfiler


def test_neuron_profiler_start_stop_and_on_trace_ready(operands, tmp_path):
    _, _, a, b = operands
    p = NeuronProfiler(NeuronConfig(profile_output_dir=str(tmp_path / "a")))
    p.start()
    torch.mm(a, b)
    path = p.stop()
    assert path == p.trace_path and any(ev.get("cat") == "kernel" for ev in load_trace(path)["traceEvents"])

    cfg = NeuronConfig(profile_output_dir=str(tmp_path / "b"))
    handler = NeuronProfiler(cfg)
    with profile(activities=ACTIVITIES, experimental_config=cfg, on_trace_ready=handler.export_trace):
        torch.mm(a, b)
    assert handler.trace_path.startswith(str(tmp_path / "b"))
    assert any(ev.get("name") == "aten::mm [tensor]" and ev.get("cat") == "kernel" for ev in load_trace(handler.trace_path)["traceEvents"])


def test_neuron_profiler_filters(operands, tmp_path):
    _, _, a, b = operands

    def categories(config, **kwargs):
        with NeuronProfiler(config, **kwargs) as p:
            torch.mm(a, b).cpu()
        events = load_trace(p.trace_path)["traceEvents"]
        return events, {ev.get("cat") for ev in events if ev.get("ph") == "X"}

    events, cats = categories(NeuronConfig(profile_output_dir=str(tmp_path), modes=[ProfileMode.RUNTIME]))
    assert "kernel" not in cats and "gpu_memcpy" not in cats and "privateuse1_runtime" in cats
    assert not [ev for ev in events if ev.get("cat") == "ac2g"]  # no arrow without its device end

    other = a.device.index + 1
    _, cats = categories(NeuronConfig(profile_output_dir=str(tmp_path), capture_enabled_for_nc=[other]))
    assert cats.isdisjoint({"kernel", "gpu_memcpy", "privateuse1_runtime"}) and "cpu_op" in cats

    events, _ = categories(NeuronConfig(profile_output_dir=str(tmp_path), max_events_per_nc=1))
    assert [ev["name"] for ev in events if ev.get("cat") in ("kernel", "gpu_memcpy")] == ["aten::mm [tensor]"]

    events, _ = categories(NeuronConfig(profile_output_dir=str(tmp_path)), event_filters=["aten::mm"])
    # The op, its launch on the device and the runtime's host side of that launch.
    assert {ev["name"] for ev in events if ev.get("ph") == "X"} == {
        "aten::mm", "aten::mm [tensor]", "nrtsim::kernel"}


def test_neuron_profiler_bad_input(tmp_path):
    with pytest.raises(TypeError, match="ProfileMode"):
        NeuronConfig(modes=["device"])
    with pytest.raises(ValueError, match="max_events_per_nc"):
        NeuronConfig(max_events_per_nc=-1)
    with pytest.raises(TypeError, match="NeuronConfig"):
        NeuronProfiler({"profile_output_dir": str(tmp_path)})
    with pytest.raises(RuntimeError, match="not started"):
        NeuronProfiler(NeuronConfig(profile_output_dir=str(tmp_path))).stop()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with NeuronProfiler(NeuronConfig(profile_output_dir=str(tmp_path), modes=[ProfileMode.CPU_UTIL])):
            pass
    assert any("CPU_UTIL" in str(w.message) for w in caught)


def engine_spans_in(events):
    return {ev["args"]["engine_span"]: ev for ev in events
            if ev.get("cat") == "gpu_user_annotation" and "engine_span" in ev.get("args", {})}


def test_single_engine_kernels_get_no_engine_spans(operands, tmp_path):
    # Kernels run on their main engine only: one device event each, nothing on other tracks.
    _, _, a, b = operands
    with profile(activities=ACTIVITIES) as prof:
        torch.relu(torch.mm(a, b))
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = load_trace(path)["traceEvents"]
    assert [ev for ev in events if ev.get("cat") == "gpu_user_annotation"] == []
    assert [e for e in prof.events() if e.is_user_annotation] == []
    threads = {ev["args"]["name"] for ev in events if ev.get("ph") == "M" and ev["name"] == "thread_name"
               and ev["pid"] == a.device.index}
    assert threads == {"tensor engine", "vector engine"}


def test_compiled_program_shows_on_each_engine_it_uses(tmp_path):
    # A compiled program's record carries the summed work of its ops; the clock models every engine
    # starting after the launch cost, busy for its work's time. The profiler draws exactly that.
    def step(x, w):
        return torch.relu(x @ w).exp() * 2

    compiled = torch.compile(step, backend="neuron")
    x_cpu, w_cpu = torch.randn(32, 16), torch.randn(16, 8)
    x, w = x_cpu.to("neuron"), w_cpu.to("neuron")
    torch.testing.assert_close(compiled(x, w).cpu(), step(x_cpu, w_cpu))
    with profile(activities=ACTIVITIES) as prof:
        compiled(x, w)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = load_trace(path)["traceEvents"]
    (program,) = [ev for ev in events if ev.get("cat") == "kernel" and ev["args"]["kind"] == "program"]
    busy = {k: float(v) for k, v in program["args"]["engine_busy_ns"].items()}
    assert {"tensor", "vector", "scalar"} <= set(busy)
    spans = engine_spans_in(events)
    assert set(spans) == set(busy)
    longest = max(busy.values())
    start = float(program["args"]["sim_end_ns"]) - longest
    for engine, ev in spans.items():
        args = ev["args"]
        assert ev["name"] == f"{program['args']['op']} ({engine} engine)"
        assert float(args["busy_ns"]) == pytest.approx(busy[engine], rel=1e-12)
        assert float(args["utilization"]) == pytest.approx(busy[engine] / longest, rel=1e-12)
        # Simulated times are float64 nanoseconds since the clock started: a difference of two of
        # them carries a few units in the last place of their magnitude (rounding in the clock,
        # in the span's end = begin + busy, and in the trace's text), whatever the span's length.
        ulps = 8 * math.ulp(float(args["sim_end_ns"]))
        assert float(args["sim_begin_ns"]) == pytest.approx(start, abs=max(1e-6, ulps))
        assert float(args["sim_end_ns"]) - float(args["sim_begin_ns"]) == pytest.approx(
            busy[engine], rel=1e-9, abs=ulps)
    # Counted once: the device events PyTorch sums are the program's alone.
    counted = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1 and not e.is_user_annotation]
    assert sum(e.self_device_time_total for e in counted) * 1000 == pytest.approx(
        float(program["args"]["sim_duration_ns"]), abs=1.0)
