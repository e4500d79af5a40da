"""TorchNeuron's Python API as code written against it uses it: the names torch_neuronx exports
at top level, get_device_name, the ValueError for a device index out of range, the nested
memory_stats schema and the "Neuron Memory Summary", and the 128 logical cores of a
trn2.48xlarge at NEURON_LOGICAL_NC_CONFIG=1 (at most 127 per process, every one reachable).

Runs in the default simulated instance (trn2.3xlarge, LNC=2: 4 devices); other topologies run in
a fresh interpreter, because the runtime reads its environment once per process."""

import json
import re

import pytest
import torch

import torch_neuronx

pytestmark = pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")

MiB = 1024**2

# Every variable the topology depends on, blank (= unset) unless a case sets it.
BLANK_ENV = {
    "TORCH_NEURONX_FALLBACK_WARN": "0",
    "NRTSIM_INSTANCE": "",
    "NEURON_LOGICAL_NC_CONFIG": "",
    "NEURON_RT_VISIBLE_CORES": "",
    "NEURON_RT_NUM_CORES": "",
    "NRTSIM_HBM_BYTES": "",
}
# trn2.48xlarge at LNC=1: 16 chips x 8 cores = 128 logical cores. 64 MiB of HBM each keeps the
# process small.
ALL_128 = {"NRTSIM_INSTANCE": "trn2.48xlarge", "NEURON_LOGICAL_NC_CONFIG": "1",
           "NRTSIM_HBM_BYTES": "64MiB"}

# What TorchNeuron exports at top level beside torch.neuron (its profiler, compile metrics and
# NKI helpers come with their own issues and are not checked here).
TORCHNEURON_TOP_LEVEL = (
    "device_count", "current_device", "set_device", "get_device_properties", "synchronize",
    "current_stream", "default_stream", "set_stream", "stream", "device", "Stream", "Event",
    "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "memory_stats", "memory_summary", "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
)


def run_json(python_subprocess, code, env):
    """Runs `code` in a fresh interpreter; it prints one JSON object as its last line."""
    result = python_subprocess(code, env={**BLANK_ENV, **env}, timeout=300)
    assert result.returncode == 0, f"subprocess failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def default_topology():
    if torch.neuron.device_count() != 4 or torch.neuron.topology()["instance"] != "trn2.3xlarge":
        pytest.skip("these checks expect the default instance (trn2.3xlarge, LNC=2)")


# --- top-level names --------------------------------------------------------------------------


@pytest.mark.parametrize("name", TORCHNEURON_TOP_LEVEL)
def test_top_level_name_is_torch_neuron_s(name):
    # The very object torch.neuron has, and listed in __all__ so that `from torch_neuronx import *`
    # brings it.
    assert getattr(torch_neuronx, name) is getattr(torch.neuron, name)
    assert name in torch_neuronx.__all__


def test_is_neuron_runtime_initialized_is_exported():
    assert "is_neuron_runtime_initialized" in torch_neuronx.__all__
    torch.neuron.init()
    assert torch_neuronx.is_neuron_runtime_initialized() is True


def test_all_lists_only_what_exists():
    for name in torch_neuronx.__all__:
        assert hasattr(torch_neuronx, name), name
    namespace = {}
    exec("from torch_neuronx import *", namespace)
    assert set(torch_neuronx.__all__) <= set(namespace)


def test_top_level_device_functions_work(default_topology):
    assert torch_neuronx.device_count() == 4
    torch_neuronx.set_device(2)
    try:
        assert torch_neuronx.current_device() == 2 == torch.accelerator.current_device_index()
        with torch_neuronx.device(1):
            assert torch_neuronx.current_device() == 1
            x = torch.arange(6.0, device="neuron")
            assert x.device == torch.device("neuron", 1)
        assert torch_neuronx.current_device() == 2
        props = torch_neuronx.get_device_properties(3)
        assert props.logical_core_id == 3 and props.name == "trn2.3xlarge"
    finally:
        torch_neuronx.set_device(0)
    assert torch.equal((x * 2).cpu(), torch.arange(6.0) * 2)


def test_top_level_streams_and_events(default_topology):
    default = torch_neuronx.default_stream(1)
    assert default.stream_id == 0 and default.device_index == 1
    side = torch_neuronx.Stream(device=1)
    assert side.stream_id != default.stream_id
    a = torch.randn(32, 32)
    with torch_neuronx.stream(side):
        assert torch_neuronx.current_stream(1) == side
        assert torch_neuronx.current_device() == 1
        start = torch_neuronx.Event(enable_timing=True)
        end = torch_neuronx.Event(enable_timing=True)
        start.record()
        b = a.to("neuron:1") @ a.to("neuron:1")
        end.record()
    assert torch_neuronx.current_stream(1) == default
    torch_neuronx.synchronize(1)
    assert start.elapsed_time(end) >= 0
    torch.testing.assert_close(b.cpu(), a @ a)
    torch_neuronx.set_stream(side)
    assert torch_neuronx.current_stream() == side and torch_neuronx.current_device() == 1
    torch_neuronx.set_stream(default)  # leave device 1 on its default stream for later tests
    torch_neuronx.set_stream(torch_neuronx.default_stream(0))
    assert torch_neuronx.current_device() == 0


# --- get_device_name ----------------------------------------------------------------------------


def test_get_device_name_is_the_device_string(default_topology):
    assert torch.neuron.get_device_name(0) == "neuron:0"
    assert torch.neuron.get_device_name(3) == "neuron:3"
    assert torch.neuron.get_device_name(torch.device("neuron", 2)) == "neuron:2"
    assert torch.neuron.get_device_name(torch.device("neuron")) == str(torch.device("neuron"))
    assert torch.neuron.get_device_name("neuron:1") == "neuron:1"
    with torch.neuron.device(2):
        assert torch.neuron.get_device_name() == "neuron:2"
    # The instance type stays where TorchNeuron keeps it too.
    assert torch.neuron.get_device_properties(0).name == "trn2.3xlarge"


def test_get_device_name_rejects_what_does_not_exist(default_topology):
    with pytest.raises(ValueError, match=r"^Device index 4 is out of range\. Valid range is 0 to 3"):
        torch.neuron.get_device_name(4)
    with pytest.raises(ValueError, match="expected a neuron device"):
        torch.neuron.get_device_name(torch.device("cpu"))


# --- out-of-range device index ----------------------------------------------------------------

OUT_OF_RANGE_20 = (
    r"^Device index 20 is out of range\. Valid range is 0 to 3 for this process: "
    r"neuron:20 does not exist among its 4 NeuronCore device\(s\) \(neuron:0-neuron:3\), "
    r"set by NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES$"
)


@pytest.mark.parametrize(
    "call",
    [
        lambda: torch.neuron.set_device(20),
        lambda: torch.neuron.set_device("neuron:20"),
        lambda: torch.neuron.device(20).__enter__(),
        lambda: torch_neuronx.set_device(20),
        lambda: torch_neuronx.device(torch.device("neuron", 20)).__enter__(),
        lambda: torch.neuron.get_device_properties(20),
        lambda: torch.neuron.manual_seed(0) or torch.neuron.get_rng_state(20),
    ],
    ids=["set_device", "set_device_str", "device_ctx", "top_set_device", "top_device_ctx",
         "properties", "rng_state"],
)
def test_out_of_range_index_is_a_value_error(default_topology, call):
    with pytest.raises(ValueError, match=OUT_OF_RANGE_20):
        call()
    assert torch.neuron.current_device() == 0  # nothing switched


def test_out_of_range_in_a_with_block_leaves_the_device_alone(default_topology):
    torch.neuron.set_device(1)
    try:
        with pytest.raises(ValueError, match=OUT_OF_RANGE_20):
            with torch.neuron.device(20):
                pass
        assert torch.neuron.current_device() == 1
    finally:
        torch.neuron.set_device(0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: torch.accelerator.set_device_index(20),
        lambda: torch.empty(1, device="neuron:20"),
        lambda: torch.ones(2).to(torch.device("neuron", 20)),
    ],
    ids=["accelerator_set_device_index", "empty", "to"],
)
def test_cpp_paths_raise_runtime_error_with_the_same_message(default_topology, call):
    # These reach the backend's C++ check through PyTorch's own entry points: RuntimeError, as
    # PyTorch raises from C++, but the same words.
    with pytest.raises(RuntimeError, match=OUT_OF_RANGE_20):
        call()
    assert torch.neuron.current_device() == 0


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: torch.neuron.set_device(200), ValueError),
        (lambda: torch.neuron.get_device_name(200), ValueError),
        (lambda: torch.neuron.synchronize(200), RuntimeError),
        (lambda: torch.neuron.Stream(device=200), RuntimeError),
        (lambda: torch.neuron.current_stream(200), RuntimeError),
        (lambda: torch.neuron.memory_allocated(200), RuntimeError),
        (lambda: torch.neuron.memory_stats(200), RuntimeError),
        (lambda: torch.neuron.mem_get_info(200), RuntimeError),
    ],
    ids=["set_device", "get_device_name", "synchronize", "Stream", "current_stream",
         "memory_allocated", "memory_stats", "mem_get_info"],
)
def test_index_beyond_a_signed_byte_is_named_as_given(default_topology, call, error):
    # PyTorch's device index is an int8: 200 would reach C++ as -56. torch.neuron checks first, so
    # the message names the index the caller passed.
    with pytest.raises(error, match=r"^Device index 200 is out of range\. Valid range is 0 to 3"):
        call()


def test_eight_devices_name_zero_to_seven(python_subprocess):
    # TorchNeuron's example message: 8 devices (trn2.3xlarge at LNC=1).
    out = run_json(
        python_subprocess,
        """
        import json
        import torch
        r = {"count": torch.neuron.device_count()}
        for name, call in [("set_device", lambda: torch.neuron.set_device(20)),
                           ("device", lambda: torch.neuron.device(20).__enter__()),
                           ("accelerator", lambda: torch.accelerator.set_device_index(20))]:
            try:
                call()
                r[name] = None
            except Exception as e:
                r[name] = [type(e).__name__, str(e).splitlines()[0]]
        print(json.dumps(r))
        """,
        env={"NEURON_LOGICAL_NC_CONFIG": "1"},
    )
    assert out["count"] == 8
    prefix = "Device index 20 is out of range. Valid range is 0 to 7 for this process"
    for name, kind in (("set_device", "ValueError"), ("device", "ValueError"),
                       ("accelerator", "RuntimeError")):
        assert out[name][0] == kind, out[name]
        assert out[name][1].startswith(prefix), out[name]
        assert "NEURON_RT_VISIBLE_CORES" in out[name][1]


# --- memory_stats schema and memory_summary -----------------------------------------------------

DEVICE = 3  # the device the fewest other tests touch
NESTED = ("allocated_bytes", "reserved_bytes", "active_bytes")
METRICS = ("current", "peak", "allocated", "freed")


def test_memory_stats_has_torchneuron_schema(default_topology):
    s = torch_neuronx.memory_stats(DEVICE)
    for key in NESTED:
        assert isinstance(s[key], dict), key
        assert set(s[key]) == set(METRICS), key
        # The nested entry is the whole-allocator ("all" pools) figure of the flat key.
        for m in METRICS:
            assert s[key][m] == s[f"{key}.all.{m}"], (key, m)
            assert isinstance(s[key][m], int)
    for counter in ("num_alloc_retries", "num_ooms", "num_tensor_frees", "allocation_requests"):
        assert isinstance(s[counter], int), counter
    # TorchNeuron's entries come first.
    assert list(s)[:7] == [*NESTED, "num_alloc_retries", "num_ooms", "num_tensor_frees",
                           "allocation_requests"]


def test_memory_stats_keeps_cuda_flat_keys_for_device_generic_code(default_topology):
    keep = torch.empty(3 * MiB, dtype=torch.uint8, device=f"neuron:{DEVICE}")
    s = torch.neuron.memory_stats(DEVICE)
    flat = torch.accelerator.memory_stats(DEVICE)
    # Every key torch.accelerator gives, with the same value (torch.accelerator.memory_allocated
    # and friends read these, as does torch.distributed's MemoryTracker through torch.neuron).
    assert {k: s[k] for k in flat} == dict(flat)
    assert s["allocated_bytes.all.current"] == torch.neuron.memory_allocated(DEVICE)
    assert s["allocated_bytes"]["current"] == torch_neuronx.memory_allocated(DEVICE)
    assert s["reserved_bytes"]["peak"] == torch_neuronx.max_memory_reserved(DEVICE)
    del keep


def test_allocation_requests_and_tensor_frees_count_tensors(default_topology):
    torch.neuron.reset_accumulated_memory_stats(DEVICE)
    s0 = torch.neuron.memory_stats(DEVICE)
    assert s0["allocation_requests"] == 0 and s0["num_tensor_frees"] == 0
    assert s0["allocated_bytes"]["allocated"] == 0 and s0["allocated_bytes"]["freed"] == 0
    a = torch.empty(1000, dtype=torch.float32, device=f"neuron:{DEVICE}")  # 4000 B -> 4096
    b = torch.empty(2 * MiB, dtype=torch.uint8, device=f"neuron:{DEVICE}")
    c = torch.empty(10, dtype=torch.uint8, device=f"neuron:{DEVICE}")  # -> 512
    del a, c
    s1 = torch.neuron.memory_stats(DEVICE)
    assert s1["allocation_requests"] == 3
    assert s1["num_tensor_frees"] == 2
    assert s1["allocated_bytes"]["allocated"] == 4096 + 2 * MiB + 512
    assert s1["allocated_bytes"]["freed"] == 4096 + 512
    assert s1["allocated_bytes"]["current"] - s0["allocated_bytes"]["current"] == 2 * MiB
    assert s1["active_bytes"]["current"] == s1["allocated_bytes"]["current"]
    assert s1["reserved_bytes"]["current"] >= s1["allocated_bytes"]["current"]
    del b
    torch_neuronx.reset_accumulated_memory_stats(DEVICE)
    s2 = torch_neuronx.memory_stats(DEVICE)
    assert s2["allocation_requests"] == 0 and s2["num_tensor_frees"] == 0
    assert s2["num_alloc_retries"] == 0 and s2["num_ooms"] == 0


def test_peak_resets_to_current(default_topology):
    big = torch.empty(4 * MiB, dtype=torch.uint8, device=f"neuron:{DEVICE}")
    del big
    torch_neuronx.reset_peak_memory_stats(DEVICE)
    s = torch_neuronx.memory_stats(DEVICE)
    for key in NESTED:
        assert s[key]["peak"] == s[key]["current"], key
    assert torch_neuronx.max_memory_allocated(DEVICE) == s["allocated_bytes"]["current"]


def test_memory_tracker_reads_neuron_stats(default_topology):
    # torch.distributed's MemoryTracker reads torch.<accelerator>.memory_stats()'s flat keys.
    from torch.distributed._tools.memory_tracker import MemoryTracker

    torch.neuron.set_device(DEVICE)
    try:
        model = torch.nn.Linear(64, 64).to(f"neuron:{DEVICE}")
        tracker = MemoryTracker()
        tracker.start_monitor(model)
        model(torch.randn(8, 64, device=f"neuron:{DEVICE}")).sum().backward()
        tracker.stop()
        active_mb = [mb for _, mb in tracker.memories_active.values()]
        allocated_mb = [mb for _, mb in tracker.memories_allocated.values()]
        assert active_mb and max(active_mb) > 0
        # The allocator hands out whole blocks: active equals allocated at every step.
        assert active_mb == allocated_mb
    finally:
        torch.neuron.set_device(0)


def test_memory_summary_is_titled_neuron_memory_summary(default_topology):
    keep = torch.empty(5 * MiB, dtype=torch.uint8, device=f"neuron:{DEVICE}")
    text = torch_neuronx.memory_summary(DEVICE)
    assert f"Neuron Memory Summary, Device {DEVICE}" in text
    s = torch.neuron.memory_stats(DEVICE)
    counts = re.search(r"Allocations: (\d+)\s+\|\s+Frees: (\d+)", text)
    assert counts, text
    assert (int(counts[1]), int(counts[2])) == (s["allocation_requests"], s["num_tensor_frees"])
    short = torch_neuronx.memory_summary(DEVICE, abbreviated=True)
    assert "Neuron Memory Summary" in short and len(short) < len(text)
    with torch.neuron.device(1):
        assert "Neuron Memory Summary, Device 1" in torch.neuron.memory_summary()
    del keep


# --- 128 logical cores ------------------------------------------------------------------------
#
# trn2.48xlarge at LNC=1 has 128 logical cores. Device index 127 fits PyTorch's int8
# c10::DeviceIndex, but a device count of 128 does not, and PyTorch sizes per-device tables by that
# count (autograd's caller streams: a backward on a 128th device reads past their end). So one
# process uses at most 127 cores and every core is reachable: see docs/compatibility.md.

USE_128 = r"128 logical NeuronCores.*at most 127.*NEURON_RT_VISIBLE_CORES"


def test_lnc1_48xlarge_without_selection_explains_the_limit(python_subprocess):
    out = run_json(
        python_subprocess,
        """
        import json
        import torch
        r = {"count": torch.neuron.device_count(), "available": torch.neuron.is_available()}
        for name, call in [("tensor", lambda: torch.ones(1, device="neuron")),
                           ("set_device", lambda: torch.neuron.set_device(0))]:
            try:
                call()
                r[name] = None
            except RuntimeError as e:
                r[name] = str(e)
        print(json.dumps(r))
        """,
        env=ALL_128,
    )
    assert out["count"] == 0 and out["available"] is False
    for name in ("tensor", "set_device"):
        assert out[name] is not None and re.search(USE_128, out[name]), out[name]


def test_every_core_of_a_lnc1_48xlarge_is_usable(python_subprocess):
    # 127 cores in one process, the last logical core (127) among them: compute, backward,
    # streams and memory on it, as on any core; and the index past the end is a ValueError.
    out = run_json(
        python_subprocess,
        """
        import json
        import torch
        import torch_neuronx
        r = {"count": torch.neuron.device_count(), "top_count": torch_neuronx.device_count(),
             "accelerator_count": torch.accelerator.device_count()}
        last = r["count"] - 1
        r["name_last"] = torch.neuron.get_device_name(last)
        p = torch.neuron.get_device_properties(last)
        r["props_last"] = [p.logical_core_id, p.chip_index, list(p.physical_cores), p.total_memory]
        a = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
        ok = []
        for i in (0, 63, last):
            x = a.to(f"neuron:{i}").requires_grad_()
            y = (x @ x).sin().sum()
            y.backward()
            xc = a.clone().requires_grad_()
            yc = (xc @ xc).sin().sum()
            yc.backward()
            ok.append(str(x.grad.device) == f"neuron:{i}"
                      and torch.allclose(y.detach().cpu(), yc.detach(), rtol=1e-5, atol=1e-4)
                      and torch.allclose(x.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5))
        r["compute_ok"] = ok
        torch.neuron.set_device(last)
        r["current"] = [torch.neuron.current_device(), torch.accelerator.current_device_index(),
                        str(torch.ones(1, device="neuron").device)]
        torch.neuron.set_device(0)
        s = torch.neuron.Stream(device=last)
        with torch.neuron.stream(s):
            z = torch.full((4,), 2.0, device=f"neuron:{last}") * 3
        torch.neuron.synchronize(last)
        r["stream_ok"] = s.device_index == last and z.cpu().tolist() == [6.0] * 4
        r["memory_last"] = torch.neuron.memory_stats(last)["allocated_bytes"]["current"]
        r["rng_states"] = len(torch.neuron.get_rng_state_all())
        try:
            torch.neuron.set_device(last + 1)
            r["past_end"] = None
        except ValueError as e:
            r["past_end"] = str(e)
        print(json.dumps(r))
        """,
        env={**ALL_128, "NEURON_RT_VISIBLE_CORES": "1-127"},
    )
    assert out["count"] == out["top_count"] == out["accelerator_count"] == 127
    assert out["name_last"] == "neuron:126"
    # neuron:126 is logical core 127, the instance's last: chip 15, physical core 127.
    assert out["props_last"] == [127, 15, [127], 64 * MiB]
    assert out["compute_ok"] == [True, True, True]
    assert out["current"] == [126, 126, "neuron:126"]
    assert out["stream_ok"] is True
    assert out["memory_last"] >= 16 * 16 * 4
    assert out["rng_states"] == 127
    assert out["past_end"].startswith(
        "Device index 127 is out of range. Valid range is 0 to 126 for this process"
    ), out["past_end"]
