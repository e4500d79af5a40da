"""The launch record: what each touch of neuron memory reports, with exact expectations.

Every kernel, copy, scalar read, storage resize and CPU-fallback computation yields one record;
torch_neuronx.kernel_trace() aggregates them per op (an observer of the records). The simulated
clock's durations are checked against the roofline of the engine-model data file.
"""

import configparser
from pathlib import Path

import pytest
import torch

import torch_neuronx

DEV = "neuron"


def trace_of(fn):
    """Runs fn and returns {op: row} of the launches it made."""
    torch.neuron.synchronize()
    torch_neuronx.clear_kernel_trace()
    fn()
    return {row["op"]: row for row in torch_neuronx.kernel_trace()}


def engine_model():
    """The data file's figures for the default instance's chip (Trainium2), per logical core."""
    path = Path(torch_neuronx.__file__).parent / "data" / "neuron_cores.ini"
    parser = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    parser.read(path)
    spec = {k: float(v) for k, v in parser["Trainium2"].items() if k != "neuroncore"}
    lnc = torch.neuron.get_device_properties(0).logical_nc_config
    return spec, lnc


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm_record(dtype):
    m, k, n = 48, 80, 24
    a = torch.randn(m, k, device=DEV, dtype=dtype)
    b = torch.randn(k, n, device=DEV, dtype=dtype)
    rows = trace_of(lambda: torch.mm(a, b))
    mm = rows["aten::mm"]
    size = a.element_size()
    assert mm["kind"] == "kernel" and mm["engine"] == "tensor" and mm["launches"] == 1
    assert mm["flops"] == 2 * m * n * k
    assert mm["ops"] == {"tensor": 2 * m * n * k, "vector": 0, "scalar": 0, "gpsimd": 0, "dma": 0}
    assert mm["bytes_read"] == (m * k + k * n) * size
    assert mm["bytes_written"] == m * n * size


def test_broadcast_add_reads_the_broadcast_operand_once():
    a = torch.randn(32, 64, device=DEV)
    row = torch.randn(64, device=DEV)
    # Functional form with the broadcast operand first: the output, not `self`, sizes the work.
    rows = trace_of(lambda: torch.add(row, a))
    add = rows["aten::add.Tensor"]
    assert add["engine"] == "vector"
    assert add["ops"]["vector"] == 32 * 64
    assert add["bytes_read"] == (32 * 64 + 64) * 4
    assert add["bytes_written"] == 32 * 64 * 4
    # An expanded (stride-0) view reads its storage once too.
    wide = row.expand(32, 64)
    rows = trace_of(lambda: wide.mul(2.0))
    mul = next(r for op, r in rows.items() if op.startswith("aten::mul"))
    # The expanded tensor only: the Python scalar (PyTorch wraps it as a 0-dim host tensor) is an
    # operand of the instruction, not HBM traffic.
    assert mul["bytes_read"] == 64 * 4
    assert mul["bytes_written"] == 32 * 64 * 4


def test_reduction_counts_input_and_output():
    x = torch.randn(16, 128, device=DEV)
    rows = trace_of(lambda: x.sum(dim=1))
    row = rows["aten::sum.dim_IntList"]
    assert row["ops"]["vector"] == 16 * 128  # one add per input element
    assert row["bytes_read"] == 16 * 128 * 4
    assert row["bytes_written"] == 16 * 4


def test_copies_are_named_by_direction():
    host = torch.randn(1000)
    dev = torch.empty(1000, device=DEV)
    rows = trace_of(lambda: dev.copy_(host))
    assert rows["aten::_copy_from"]["kind"] == "copy_host_to_device"
    assert rows["aten::_copy_from"]["bytes_written"] == 4000
    rows = trace_of(lambda: dev.cpu())
    assert rows["aten::_copy_from"]["kind"] == "copy_device_to_host"
    assert rows["aten::_copy_from"]["bytes_read"] == 4000
    other = torch.empty(1000, device=DEV)
    rows = trace_of(lambda: other.copy_(dev))
    assert rows["aten::_copy_from"]["kind"] == "copy_device_to_device"
    assert rows["aten::_copy_from"]["engine"] == "dma"
    # A converting (strided) copy is one DMA launch too, by direction.
    rows = trace_of(lambda: host.to(DEV, torch.float16))
    assert rows["aten::_copy_from"]["kind"] == "copy_host_to_device"
    assert rows["aten::_copy_from"]["bytes_read"] == 4000
    assert rows["aten::_copy_from"]["bytes_written"] == 2000


def test_item_is_a_scalar_read():
    x = torch.tensor([3.5], device=DEV, dtype=torch.float64)
    rows = trace_of(lambda: x.item())
    read = rows["aten::_local_scalar_dense"]
    assert read["kind"] == "scalar_read" and read["launches"] == 1
    assert read["bytes_read"] == 8 and read["bytes_written"] == 0


def test_storage_growth_is_a_resize_record():
    x = torch.randn(100, device=DEV)
    rows = trace_of(lambda: x.resize_(1000))
    resize = rows["nrtsim::storage_resize"]
    assert resize["kind"] == "resize"
    assert resize["bytes_read"] == 400 and resize["bytes_written"] == 400


def test_fallback_is_host_work_with_its_copies():
    x = torch.randn(64, device=DEV)
    rows = trace_of(lambda: torch.special.erfcx(x))
    fallback = rows["aten::special_erfcx.out"]
    assert fallback["kind"] == "host_fallback"
    assert fallback["host_ns"] > 0 and fallback["sim_ns"] > 0
    assert rows["aten::_copy_from"]["launches"] >= 2  # in and out
    assert "aten::special_erfcx.out" in torch_neuronx.get_fallback_ops()


def test_large_bf16_gemm_takes_its_roofline_time():
    spec, lnc = engine_model()
    n = 4096
    a = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    start.record()
    torch.mm(a, b)
    end.record()
    end.synchronize()
    peak_flops_per_ns = 2 * spec["tensor_macs_per_cycle"] * spec["tensor_clock_ghz"] * lnc
    bytes_per_ns = spec["hbm_gbytes_per_s"] * lnc
    roofline_ms = max(2 * n**3 / peak_flops_per_ns, 3 * n * n * 2 / bytes_per_ns) / 1e6
    assert start.elapsed_time(end) == pytest.approx(roofline_ms, rel=0.10)
    # Host wall time is a different number, still available.
    assert start.host_elapsed_time(end) > 0


def test_fp32_gemm_runs_at_a_quarter_of_the_bf16_rate():
    n = 1024
    times = {}
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(n, n, device=DEV, dtype=dtype)
        rows = trace_of(lambda: torch.mm(a, a))
        times[dtype] = rows["aten::mm"]["sim_ns"]
    spec, _ = engine_model()
    # Both compute-bound: the ratio is the data file's FP32 slowdown (launch cost aside).
    launch = spec["kernel_launch_ns"]
    ratio = (times[torch.float32] - launch) / (times[torch.bfloat16] - launch)
    assert ratio == pytest.approx(spec["tensor_fp32_slowdown"], rel=1e-6)


def test_simulated_time_advances_by_the_launches():
    before = torch_neuronx.simulated_time(0)
    x = torch.randn(256, 256, device=DEV)
    rows = trace_of(lambda: torch.mm(x, x))
    after = torch_neuronx.simulated_time(0)
    assert after["now_ns"] >= before["now_ns"] + rows["aten::mm"]["sim_ns"]
    assert after["busy_ns"]["tensor"] > before["busy_ns"]["tensor"]
    assert set(after["busy_ns"]) == {"tensor", "vector", "scalar", "gpsimd", "dma"}


def test_streams_order_on_the_simulated_clock():
    x = torch.randn(1024, 1024, device=DEV, dtype=torch.bfloat16)
    gemm_ns = trace_of(lambda: torch.mm(x, x))["aten::mm"]["sim_ns"]
    s1 = torch.neuron.Stream()
    s2 = torch.neuron.Stream()
    e_mid = torch.neuron.Event(enable_timing=True)
    e_start2 = torch.neuron.Event(enable_timing=True)
    e_end = torch.neuron.Event(enable_timing=True)
    with torch.neuron.stream(s1):
        torch.mm(x, x)
        e_mid.record()
    # s2 waits for s1's GEMM: on the simulated clock its own GEMM starts no earlier than e_mid
    # and ends one GEMM later.
    s2.wait_event(e_mid)
    with torch.neuron.stream(s2):
        e_start2.record()
        torch.mm(x, x)
        e_end.record()
    e_end.synchronize()
    assert e_mid.elapsed_time(e_start2) >= 0
    assert e_start2.elapsed_time(e_end) == pytest.approx(gemm_ns / 1e6, rel=1e-9)
    assert e_mid.elapsed_time(e_end) == pytest.approx(gemm_ns / 1e6, rel=1e-9)


def test_one_stream_runs_in_order_on_the_simulated_clock():
    x = torch.randn(512, 512, device=DEV)
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    torch.mm(x, x)  # the default stream is now at the engine's frontier
    start.record()
    rows = trace_of(lambda: [torch.mm(x, x) for _ in range(3)])
    end.record()
    assert rows["aten::mm"]["launches"] == 3
    assert start.elapsed_time(end) == pytest.approx(rows["aten::mm"]["sim_ns"] / 1e6, rel=1e-9)


def test_bf16_attention_backward_runs_at_the_bf16_rate():
    # The backward reads the forward's float32 logsumexp; that must not make a bf16 backward's
    # matmuls count at the float32 rate. Same shapes in float32 and bfloat16, both compute-bound:
    # the float32 one is the data file's FP32 slowdown slower (launch cost aside).
    times = {}
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(1, 4, 512, 64, dtype=dtype, device=DEV, requires_grad=True)
                   for _ in range(3))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        grad = torch.ones_like(out)
        rows = trace_of(lambda: out.backward(grad))
        times[dtype] = rows["aten::_scaled_dot_product_fused_attention_overrideable_backward"]["sim_ns"]
    spec, _ = engine_model()
    launch = spec["kernel_launch_ns"]
    ratio = (times[torch.float32] - launch) / (times[torch.bfloat16] - launch)
    assert ratio == pytest.approx(spec["tensor_fp32_slowdown"], rel=1e-6)
