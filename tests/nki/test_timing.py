"""The instruction-level timeline: costs are the data file's rates (known answers), independent
instructions on different engines overlap, dependencies serialise."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import torch_neuronx

# Trainium2 / NeuronCore-v3 rows of torch_neuronx/data/neuron_cores.ini.
TENSOR_GHZ = 2.4
VECTOR_GHZ = 0.96
ACCESS_START = 60  # cycles


@nki.jit(platform_target="trn2")
def one_matmul(a, b):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    at = nl.load(a)
    bt = nl.load(b)
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, at, bt)
    s = nl.copy(acc)
    nl.store(out, s)
    return out


def test_instruction_costs_are_the_data_files_rates():
    a = np.ones((128, 128), np.float32).astype(np.float16)
    b = np.ones((128, 512), np.float32).astype(np.float16)
    out = one_matmul(a, b)
    np.testing.assert_array_equal(out, 128.0)
    run = one_matmul.last_run
    # 16-bit matmul: max(N, 64) = 512 cycles at 2.4 GHz.
    assert run.busy_ns["tensor"] == pytest.approx(512 / TENSOR_GHZ)
    # fp32 copy of 512 elements per partition: 512 x 128 / 256 per cycle + 60 at 0.96 GHz.
    assert run.busy_ns["vector"] == pytest.approx((512 * 128 / 256 + ACCESS_START) / VECTOR_GHZ)
    moved = 128 * 128 * 2 + 128 * 512 * 2 + 128 * 512 * 4
    assert run.dma_bytes == moved
    # nki/data/dma.ini [v3]: each transfer's 128 rows (one descriptor per partition) go 8 to each
    # of the 16 DMA engines: transfer_fixed_ns (0 on v3) + 8 x (22.3 ns + row bytes / 23 B/ns).
    # The two loads queue one after the other on the engines; the store runs after the matmul.

    def transfer(row_bytes):
        return 0 + 8 * (22.3 + row_bytes / 23)

    assert run.busy_ns["dma"] == pytest.approx(transfer(256) + transfer(1024) + transfer(2048))
    assert run.matmul_flops == 2 * 128 * 128 * 512


@nki.jit(platform_target="trn2")
def independent(x, y):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    u = nl.load(y)
    a = nl.exp(t)  # Scalar engine
    b = nl.multiply(t, 2.0)  # Vector engine, reads the same tile, independent of a
    nl.store(out, a)
    nl.store(out2, b)
    return out, out2


@nki.jit(platform_target="trn2")
def dependent(x, y):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    u = nl.load(y)
    a = nl.exp(t)
    b = nl.multiply(a, 2.0)  # waits for a
    nl.store(out, a)
    nl.store(out2, b)
    return out, out2


def test_engines_overlap_and_dependencies_serialise():
    x = np.ones((128, 2048), np.float32)
    independent(x, x)
    spec = independent.specialize((x, x), {})
    times = spec.timeline()["instruction_times_ns"]
    # Instructions: load, load, exp (scalar), multiply (vector), store, store.
    exp_t, mul_t = times[2], times[3]
    assert mul_t[0] < exp_t[1] and exp_t[0] < mul_t[1]  # they overlap in time
    dependent(x, x)
    times = dependent.specialize((x, x), {}).timeline()["instruction_times_ns"]
    exp_t, mul_t = times[2], times[3]
    assert mul_t[0] >= exp_t[1]  # the multiply starts after the exp it reads has finished
    run_i, run_d = independent.last_run, dependent.last_run
    assert run_d.makespan_ns >= run_i.makespan_ns  # both end DMA-bound here
    assert run_d.busy_ns == pytest.approx(run_i.busy_ns)  # same work, other schedule


def test_launch_on_neuron_advances_the_clock_by_the_timeline():
    import torch

    x = torch.ones(128, 2048, device="neuron")
    before = torch_neuronx.simulated_time()
    dependent(x, x)
    after = torch_neuronx.simulated_time()
    run = dependent.last_run
    for engine in ("tensor", "vector", "scalar", "gpsimd"):
        assert after["busy_ns"][engine] - before["busy_ns"][engine] == pytest.approx(
            run.busy_ns[engine])
    assert after["now_ns"] - before["now_ns"] >= run.makespan_ns


def test_profiler_shows_the_kernel_as_one_device_event():
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(128, 512, device="neuron")
    dependent(x, x)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        dependent(x, x)
    # The launch's event is named after the kernel and its engine, as every launch's is
    # ("aten::mm [tensor]"); the per-engine spans ("nki::dependent (vector engine)") are
    # annotations drawn beside it and do not count.
    events = [e for e in prof.events() if e.name.startswith("nki::dependent [")]
    assert len(events) == 1
    launch_ns = torch_neuronx.core_model()["kernel_launch_ns"]
    # Profiler times are in microseconds: the launch's fixed cost plus the kernel's timeline.
    assert events[0].device_time_total == pytest.approx(
        (launch_ns + dependent.last_run.makespan_ns) / 1e3, rel=1e-3)
