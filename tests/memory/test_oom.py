"""Out of HBM: torch.OutOfMemoryError with requested, free and capacity bytes, and a process
that keeps working afterwards with its existing tensors intact.

One subprocess with a small simulated HBM (NRTSIM_HBM_BYTES=64MiB per core) runs every scenario
and reports; the tests below check its report."""

import json
import os
import subprocess
import sys

import pytest

MiB = 1024**2
CAPACITY = 64 * MiB

SCENARIOS = r"""
import json
import torch

MiB = 1024 ** 2
r = {}

def oom(fn):
    try:
        fn()
    except torch.OutOfMemoryError as e:
        return {"type": type(e).__name__, "runtime_error": isinstance(e, RuntimeError),
                "message": str(e)}
    return None

# Tensors that must survive every failure below.
keep_cpu = torch.arange(4096, dtype=torch.float32)
keep = keep_cpu.to("neuron")
keep1 = (keep_cpu * 2).to("neuron:1")

# 1. A request larger than the core: nothing is cached, so free is what HBM has left.
torch.neuron.empty_cache()
free_before, capacity = torch.neuron.mem_get_info()
allocated_before = torch.neuron.memory_allocated()
r["too_big"] = oom(lambda: torch.empty(100 * MiB, dtype=torch.uint8, device="neuron"))
r["too_big_free"] = free_before
r["capacity"] = capacity
r["allocated_unchanged"] = torch.neuron.memory_allocated() == allocated_before
stats = torch.neuron.memory_stats()
r["num_ooms"] = stats["num_ooms"]

# 2. Afterwards: smaller allocations and compute work, and match the CPU.
a = torch.randn(256, 256)
n = a.to("neuron")
r["compute_after_oom"] = torch.allclose((n @ n + 1).cpu(), a @ a + 1, atol=1e-4)
big_ok = torch.empty(40 * MiB, dtype=torch.uint8, device="neuron")
r["allocate_after_oom"] = big_ok.numel() == 40 * MiB
big_ok.fill_(3)
r["fill_after_oom"] = int(big_ok[::MiB].sum().item()) == 3 * 40

# 3. An op whose result does not fit (the CPU fallback's result allocation): no leak.
allocated_before = torch.neuron.memory_allocated()
r["op_result"] = oom(lambda: torch.cat([big_ok, big_ok]))
r["op_no_leak"] = torch.neuron.memory_allocated() == allocated_before
r["op_input_intact"] = int(big_ok[::MiB].sum().item()) == 3 * 40

# 4. A host-to-device copy that does not fit.
r["h2d"] = oom(lambda: torch.zeros(30 * MiB, dtype=torch.float32).to("neuron"))
del big_ok

# 5. Cached blocks are given back before giving up: 5 x 10 MiB freed into the cache, then one
#    50 MiB request that only fits once the cache is released.
blocks = [torch.empty(10 * MiB, dtype=torch.uint8, device="neuron") for _ in range(5)]
del blocks
reserved_cached = torch.neuron.memory_reserved()
retries_before = torch.neuron.memory_stats()["num_alloc_retries"]
y = torch.empty(50 * MiB, dtype=torch.uint8, device="neuron")
r["retry_succeeded"] = y.numel() == 50 * MiB
r["retries"] = torch.neuron.memory_stats()["num_alloc_retries"] - retries_before
r["reserved_dropped"] = torch.neuron.memory_reserved() < reserved_cached + 50 * MiB
del y

# 6. Each core has its own HBM: neuron:1 fails on its own, naming itself.
r["other_device"] = oom(lambda: torch.empty(65 * MiB, dtype=torch.uint8, device="neuron:1"))
r["device0_unaffected"] = torch.empty(32 * MiB, dtype=torch.uint8, device="neuron").numel() > 0

# 7. Existing tensors are intact after all of it.
r["keep_intact"] = torch.equal(keep.cpu(), keep_cpu)
r["keep1_intact"] = torch.equal(keep1.cpu(), keep_cpu * 2)
r["final_compute"] = torch.equal((keep + keep1.to("neuron:0")).cpu(), keep_cpu * 3)
print(json.dumps(r))
"""


@pytest.fixture(scope="module")
def report():
    # Module-scoped (one subprocess for all the checks), so not conftest's per-test fixture.
    env = {
        **os.environ,
        "NRTSIM_HBM_BYTES": "64MiB",
        "TORCH_NEURONX_FALLBACK_WARN": "0",
        "NRTSIM_INSTANCE": "",
        "NEURON_LOGICAL_NC_CONFIG": "",
        "NEURON_RT_VISIBLE_CORES": "",
        "NEURON_RT_NUM_CORES": "",
    }
    result = subprocess.run(
        [sys.executable, "-c", SCENARIOS], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"subprocess failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_oom_raises_out_of_memory_error_with_numbers(report):
    e = report["too_big"]
    assert e is not None, "no OutOfMemoryError for 100 MiB on a 64 MiB core"
    assert e["type"] == "OutOfMemoryError" and e["runtime_error"]
    assert report["capacity"] == CAPACITY
    message = e["message"]
    assert "neuron:0" in message
    assert str(100 * MiB) in message  # requested
    assert str(report["too_big_free"]) in message  # free
    assert str(CAPACITY) in message  # capacity
    assert "NRTSIM_HBM_BYTES" in message  # what to do
    assert report["num_ooms"] == 1
    assert report["allocated_unchanged"]


def test_process_keeps_working_after_oom(report):
    assert report["compute_after_oom"]
    assert report["allocate_after_oom"]
    assert report["fill_after_oom"]


def test_oom_in_op_result_leaks_nothing(report):
    e = report["op_result"]
    assert e is not None and e["type"] == "OutOfMemoryError"
    assert str(80 * MiB) in e["message"]
    assert report["op_no_leak"]
    assert report["op_input_intact"]


def test_oom_in_host_to_device_copy(report):
    e = report["h2d"]
    assert e is not None and e["type"] == "OutOfMemoryError"
    assert str(120 * MiB) in e["message"]


def test_cache_is_released_before_oom(report):
    assert report["retry_succeeded"]
    assert report["retries"] == 1
    assert report["reserved_dropped"]


def test_oom_is_per_device(report):
    e = report["other_device"]
    assert e is not None and "neuron:1" in e["message"]
    assert str(65 * MiB) in e["message"]
    assert report["device0_unaffected"]


def test_existing_tensors_intact(report):
    assert report["keep_intact"]
    assert report["keep1_intact"]
    assert report["final_compute"]


HOST_REFUSES = r"""
import json, resource, torch

GiB = 1024 ** 3
torch.ones(1, device="neuron")  # the runtime is up before the limit
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
# Room for 256 MiB more address space: a 4 GiB tensor cannot be mapped, though the simulated
# core has 24 GiB free.
resource.setrlimit(resource.RLIMIT_AS, (vm + 256 * 1024 ** 2, resource.RLIM_INFINITY))
try:
    torch.empty(4 * GiB, dtype=torch.uint8, device="neuron")
    print(json.dumps(None))
except torch.OutOfMemoryError as e:
    small = torch.ones(1024, device="neuron").sum().item()  # the process goes on working
    print(json.dumps({"message": str(e), "small": small}))
"""


def test_host_refusing_memory_is_not_reported_as_out_of_hbm():
    """Under `ulimit -v` the host cannot map a tensor the simulated core has room for: the error
    says the host refused, that NRTSIM_HBM_BYTES is not the fix, and what is (it once read "out
    of HBM ... 24.00 GiB free of a capacity of 24.00 GiB, raise NRTSIM_HBM_BYTES")."""
    env = dict(os.environ)
    env.pop("NRTSIM_HBM_BYTES", None)  # the instance's own HBM per core: several GiB
    proc = subprocess.run([sys.executable, "-c", HOST_REFUSES], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result is not None, "a 4 GiB tensor was allocated under a 256 MiB address-space margin"
    message = result["message"]
    assert "is out of HBM" not in message
    assert "the host refused the memory" in message
    assert "ulimit -v" in message and "NRTSIM_HBM_BYTES does not help" in message
    assert "4.00 GiB (4294967296 bytes)" in message
    assert result["small"] == 1024
