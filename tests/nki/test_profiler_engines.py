"""An NKI kernel in torch.profiler: one device event with the launch's modelled duration (the one
PyTorch counts), plus a span on each engine track the kernel used, placed where the interpreter's
timeline puts that engine's first and last instruction, with its busy time and utilisation.

Expectations come from the kernel's own timeline (kernel.last_run) and the launch record
(kernel_trace()); the only slack is the profiler's whole-nanosecond time base and the 1 ns Kineto's
Chrome trace writer adds on each side of a GPU user annotation."""

import json
import math
from decimal import Decimal

import numpy as np
import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

import nki
import nki.isa as nisa
import nki.language as nl
import torch_neuronx
from torch_neuronx import nki_op

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
K, M, N, TILES = 128, 128, 512, 4
OP = "nki::mm_exp_kernel"


@nki.jit
def mm_exp_kernel(a, b):
    # Per column tile: a matmul (Tensor engine) into PSUM, exp out of PSUM (Scalar engine), a scale
    # (Vector engine), loads and a store (DMA): every engine but GpSimd.
    out = nl.ndarray((M, N * TILES), nl.float32, buffer=nl.shared_hbm)
    at = nl.load(a)
    for j in range(TILES):
        bt = nl.load(b[:, j * N:(j + 1) * N])
        acc = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, at, bt)
        e = nl.exp(acc)
        nl.store(out[:, j * N:(j + 1) * N], nl.multiply(e, 0.5))
    return out


@nki_op("nki_profiler_tests::mm_exp", mutates_args={})
def mm_exp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return mm_exp_kernel(a, b)


def ns(us):
    return int(Decimal(us) * 1000)


def record_ns(op):
    rows = [r for r in torch_neuronx.kernel_trace() if r["op"] == op]
    assert len(rows) == 1 and rows[0]["launches"] == 1, rows
    return rows[0]["sim_ns"]


@pytest.fixture(scope="module")
def operands():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(K, M, generator=g) * 0.1
    b = torch.randn(K, N * TILES, generator=g) * 0.1
    out = mm_exp(a.to("neuron"), b.to("neuron")).cpu()  # specialises outside the profiled region
    # FP32 matmul: |error| <= K u sum|a||b| (u = 2^-24); exp turns that absolute error into a
    # relative one and adds its own few ulp; the scale by 0.5 is exact.
    u = np.finfo(np.float32).eps / 2
    bound = K * u * (a.abs().t() @ b.abs()) + 4 * u
    ref = torch.exp(a.t().double() @ b.double()) * 0.5
    assert ((out.double() - ref).abs() <= bound.double() * ref.abs()).all()
    return a.to("neuron"), b.to("neuron")


def test_chrome_trace_shows_the_kernel_on_each_engine_it_used(operands, tmp_path):
    a, b = operands
    torch_neuronx.clear_kernel_trace()
    with profile(activities=ACTIVITIES) as prof:
        with record_function("step"):
            mm_exp(a, b)
    run = mm_exp_kernel.last_run
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        events = json.load(f, parse_float=Decimal)["traceEvents"]

    (kernel,) = [ev for ev in events if ev.get("cat") == "kernel" and ev["args"]["op"] == OP]
    assert abs(ns(kernel["dur"]) - record_ns(OP)) <= 1
    spans = {ev["args"]["engine_span"]: ev for ev in events
             if ev.get("cat") == "gpu_user_annotation" and "engine_span" in ev.get("args", {})}
    used = {e for e, n in run.instructions.items() if n}
    assert used == {"tensor", "vector", "scalar", "dma"}
    assert set(spans) == used

    meta = {(ev["name"], ev["pid"], ev["tid"]): ev["args"] for ev in events if ev.get("ph") == "M"}
    launch_ns = torch_neuronx.core_model()["kernel_launch_ns"]
    kernel_begin = ns(kernel["ts"])
    kernel_end = kernel_begin + ns(kernel["dur"])
    for engine, ev in spans.items():
        args = ev["args"]
        assert ev["name"] == f"{OP} ({engine} engine)"
        assert ev["pid"] == kernel["pid"]
        assert meta[("thread_name", ev["pid"], ev["tid"])]["name"] == f"{engine} engine"
        assert float(args["busy_ns"]) == pytest.approx(run.busy_ns[engine], rel=1e-12)
        assert float(args["utilization"]) == pytest.approx(run.utilization[engine], rel=1e-12)
        # The engine's first start and last end on the timeline, which begins after the launch cost.
        begin, end = run.engine_spans_ns[engine]
        assert 0 <= begin < end <= run.makespan_ns
        assert run.busy_ns[engine] <= end - begin + 1e-9  # one program: busy time fits in the span
        # Differences of float64 simulated times: a few units in the last place of their magnitude.
        ulps = 8 * math.ulp(float(args["sim_end_ns"]))
        assert float(args["sim_begin_ns"]) - float(kernel["args"]["sim_begin_ns"]) == pytest.approx(
            launch_ns + begin, abs=max(1e-6, ulps))
        assert float(args["sim_end_ns"]) - float(args["sim_begin_ns"]) == pytest.approx(
            end - begin, rel=1e-9, abs=ulps)
        # Drawn there: whole-ns rounding of each end (1 ns), Kineto's 1 ns widening on each side,
        # and on the kernel's own track 1 ns inside it so that the span nests in the kernel.
        shown_begin, shown_end = ns(ev["ts"]) + 1, ns(ev["ts"]) + ns(ev["dur"]) - 1
        assert abs(shown_begin - kernel_begin - (launch_ns + begin)) <= 2
        assert abs(shown_end - kernel_begin - (launch_ns + end)) <= 2
        if ev["tid"] == kernel["tid"]:
            assert kernel_begin <= ns(ev["ts"]) and ns(ev["ts"]) + ns(ev["dur"]) <= kernel_end
    # The last DMA (the store) ends the kernel.
    assert max(end for _, end in run.engine_spans_ns.values()) == pytest.approx(run.makespan_ns)

    # The record_function range encloses the kernel on the kernel's own track, and only there:
    # its device time is the kernel's, counted once (the engine spans are the same launch's time).
    ranges = [ev for ev in events if ev.get("cat") == "gpu_user_annotation" and ev["name"] == "step"]
    assert [r["tid"] for r in ranges] == [kernel["tid"]]
    (r,) = ranges
    assert ns(r["ts"]) <= kernel_begin + 1 and kernel_end <= ns(r["ts"]) + ns(r["dur"]) + 1


def test_key_averages_count_the_kernel_once(operands):
    a, b = operands
    torch_neuronx.clear_kernel_trace()
    with profile(activities=ACTIVITIES) as prof:
        mm_exp(a, b)
    duration_us = record_ns(OP) / 1e3
    spans = [e for e in prof.events()
             if e.device_type == DeviceType.PrivateUse1 and e.is_user_annotation and e.name.startswith(OP + " (")]
    assert len(spans) == 4
    # Counting the engine spans would show: together they are longer than the kernel.
    assert sum(e.time_range.elapsed_us() for e in spans) > duration_us * 1.2

    (cpu_op,) = [e for e in prof.events()
                 if e.device_type == DeviceType.CPU and e.name == "nki_profiler_tests::mm_exp"]
    # The device event is named after the kernel and its main engine ("<op> [tensor]").
    assert [k.name.rsplit(" [", 1)[0] for k in cpu_op.kernels] == [OP]
    assert cpu_op.device_time_total == pytest.approx(duration_us, abs=1e-3)
    rows = {(r.key, r.device_type): r for r in prof.key_averages()}
    assert rows[("nki_profiler_tests::mm_exp", DeviceType.CPU)].self_device_time_total == pytest.approx(
        duration_us, abs=1e-3)
    # The table's "Self NEURON time total" sums device events that are not user annotations.
    counted = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1 and not e.is_user_annotation]
    assert sum(e.self_device_time_total for e in counted) == pytest.approx(duration_us, abs=1e-3)
    assert "Self NEURON time total: " in prof.key_averages().table()



def test_neuron_profiler_event_cap_drops_engine_spans_with_their_kernel(operands, tmp_path):
    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler

    a, b = operands
    with NeuronProfiler(NeuronConfig(profile_output_dir=str(tmp_path), max_events_per_nc=1)) as p:
        mm_exp(a, b)
        mm_exp(a, b)
    with open(p.trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels = [ev for ev in events if ev.get("cat") == "kernel" and ev["args"]["op"] == OP]
    spans = [ev for ev in events if "engine_span" in (ev.get("args") or {})]
    assert len(kernels) == 1  # the cap kept the first launch only
    # ... and the engine spans of that launch, not the second one's.
    assert sorted(ev["args"]["engine_span"] for ev in spans) == ["dma", "scalar", "tensor", "vector"]
    assert {ev["args"]["correlation"] for ev in spans} == {kernels[0]["args"]["correlation"]}
