"""The simulated topology each environment variable selects: instance presets, logical core
config, visible cores, core count and HBM override. The runtime reads its environment once per
process, so each configuration runs in a fresh interpreter that reports what torch.neuron sees
and proves the last visible device works."""

import json

import pytest

GiB = 1024**3
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

REPORT = """
import json
import torch
n = torch.neuron.device_count()
r = {"count": n, "accelerator_count": torch.accelerator.device_count(),
     "available": torch.neuron.is_available()}
if n:
    props = [torch.neuron.get_device_properties(i) for i in range(n)]
    r["names"] = sorted({p.name for p in props})
    r["chips"] = sorted({p.chip for p in props})
    r["total_memory"] = sorted({p.total_memory for p in props})
    r["logical_ids"] = [p.logical_core_id for p in props]
    r["chip_index"] = [p.chip_index for p in props]
    r["physical_cores"] = [list(p.physical_cores) for p in props]
    r["lnc"] = sorted({p.logical_nc_config for p in props})
    r["capability"] = list(torch.neuron.get_device_capability(n - 1))
    r["hbm_total"] = torch.neuron.mem_get_info(n - 1)[1]
    topo = torch.neuron.topology()
    r["chips_on_instance"] = topo["chips"]
    r["logical_cores_on_instance"] = topo["logical_cores_on_instance"]
    # The last device is real: compute there and compare with the CPU.
    a = torch.arange(12.0).reshape(3, 4)
    x = a.to(f"neuron:{n - 1}")
    r["last_device_ok"] = str(x.device) == f"neuron:{n - 1}" and torch.equal((x * 3).cpu(), a * 3)
else:
    from torch_neuronx import _C
    r["why"] = _C._configuration_error()
print(json.dumps(r))
"""


def topology(python_subprocess, **env):
    result = python_subprocess(REPORT, env={**BLANK_ENV, **env})
    assert result.returncode == 0, f"subprocess failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def pairs(n, lnc):
    return [[i * lnc + p for p in range(lnc)] for i in range(n)]


def test_default_is_trn2_3xlarge_lnc2(python_subprocess):
    r = topology(python_subprocess)
    assert r["count"] == r["accelerator_count"] == 4
    assert r["names"] == ["trn2.3xlarge"] and r["chips"] == ["Trainium2"]
    assert r["total_memory"] == [24 * GiB] and r["hbm_total"] == 24 * GiB
    assert r["lnc"] == [2]
    assert r["logical_ids"] == [0, 1, 2, 3]
    assert r["physical_cores"] == pairs(4, 2)
    assert r["capability"] == [3, 0]
    assert r["last_device_ok"]


def test_logical_nc_config_1_gives_8_devices(python_subprocess):
    r = topology(python_subprocess, NEURON_LOGICAL_NC_CONFIG="1")
    assert r["count"] == 8
    assert r["lnc"] == [1]
    assert r["total_memory"] == [12 * GiB]  # 96 GiB per chip over 8 cores
    assert r["physical_cores"] == [[i] for i in range(8)]
    assert r["last_device_ok"]


def test_visible_cores_range(python_subprocess):
    r = topology(python_subprocess, NEURON_RT_VISIBLE_CORES="0-1")
    assert r["count"] == 2
    assert r["logical_ids"] == [0, 1]
    assert r["physical_cores"] == [[0, 1], [2, 3]]
    assert r["last_device_ok"]


def test_visible_single_core_renumbers_to_neuron0(python_subprocess):
    r = topology(python_subprocess, NEURON_RT_VISIBLE_CORES="2")
    assert r["count"] == 1
    assert r["logical_ids"] == [2]  # neuron:0 is logical core 2
    assert r["physical_cores"] == [[4, 5]]
    assert r["last_device_ok"]


def test_visible_cores_list_with_lnc1(python_subprocess):
    r = topology(python_subprocess, NEURON_LOGICAL_NC_CONFIG="1", NEURON_RT_VISIBLE_CORES="1,5-6")
    assert r["count"] == 3
    assert r["logical_ids"] == [1, 5, 6]
    assert r["physical_cores"] == [[1], [5], [6]]
    assert r["last_device_ok"]


def test_num_cores(python_subprocess):
    r = topology(python_subprocess, NEURON_RT_NUM_CORES="3")
    assert r["count"] == 3
    assert r["logical_ids"] == [0, 1, 2]
    assert r["last_device_ok"]


def test_visible_cores_take_precedence_over_num_cores(python_subprocess):
    r = topology(python_subprocess, NEURON_RT_VISIBLE_CORES="3", NEURON_RT_NUM_CORES="2")
    assert r["count"] == 1
    assert r["logical_ids"] == [3]


def test_hbm_override(python_subprocess):
    r = topology(python_subprocess, NRTSIM_HBM_BYTES="64MiB")
    assert r["count"] == 4
    assert r["total_memory"] == [64 * MiB]
    assert r["hbm_total"] == 64 * MiB
    assert r["last_device_ok"]


@pytest.mark.parametrize(
    "instance, count, chip, memory, capability, chips",
    [
        ("trn1.2xlarge", 2, "Trainium1", 16 * GiB, [2, 0], 1),
        ("trn1.32xlarge", 32, "Trainium1", 16 * GiB, [2, 0], 16),
        ("trn2.3xlarge", 4, "Trainium2", 24 * GiB, [3, 0], 1),
        ("trn2.48xlarge", 64, "Trainium2", 24 * GiB, [3, 0], 16),
        ("trn2u.48xlarge", 64, "Trainium2", 24 * GiB, [3, 0], 16),
        ("trn3.3xlarge", 4, "Trainium3", 36 * GiB, [4, 0], 1),
        ("trn3.48xlarge", 64, "Trainium3", 36 * GiB, [4, 0], 16),
    ],
)
def test_instance_presets(python_subprocess, instance, count, chip, memory, capability, chips):
    r = topology(python_subprocess, NRTSIM_INSTANCE=instance)
    assert r["count"] == count
    assert r["names"] == [instance]
    assert r["chips"] == [chip]
    assert r["total_memory"] == [memory]
    assert r["capability"] == capability
    assert r["chips_on_instance"] == chips
    assert r["logical_cores_on_instance"] == count
    assert r["logical_ids"] == list(range(count))
    # Logical cores fill chips in order: count / chips of them per chip.
    per_chip = count // chips
    assert r["chip_index"] == [i // per_chip for i in range(count)]
    lnc = 1 if chip == "Trainium1" else 2
    assert r["physical_cores"] == pairs(count, lnc)
    assert r["last_device_ok"]


def test_trn2_48xlarge_lnc1_exceeds_pytorch_device_limit(python_subprocess):
    # 128 logical cores, but PyTorch counts a process's devices in an int8: at most 127.
    r = topology(python_subprocess, NRTSIM_INSTANCE="trn2.48xlarge", NEURON_LOGICAL_NC_CONFIG="1")
    assert r["count"] == 0 and r["available"] is False
    assert "128" in r["why"] and "at most 127" in r["why"] and "NEURON_RT_VISIBLE_CORES" in r["why"]


def test_trn2_48xlarge_lnc1_one_chip_of_cores(python_subprocess):
    r = topology(
        python_subprocess,
        NRTSIM_INSTANCE="trn2.48xlarge",
        NEURON_LOGICAL_NC_CONFIG="1",
        NEURON_RT_VISIBLE_CORES="120-127",
    )
    assert r["count"] == 8
    assert r["logical_ids"] == list(range(120, 128))
    assert r["chip_index"] == [15] * 8
    assert r["total_memory"] == [12 * GiB]
    assert r["last_device_ok"]
