"""TorchNeuron's collective contract (issue 31): the forms TorchNeuron's own collective tests use
and the errors Gloo gives, at 4 ranks; the checks run in workers/contract.py against CPU
references. Also: a group outlives the rank that hosts the c10d store, and torchrun with more
processes than the instance has cores says so in those terms."""

import os
import subprocess
import sys
from pathlib import Path

from launcher import assert_all_ok, report, run_ranks, start_ranks, wait_ranks

SCENARIOS = ["invalid_roots", "reduce_scatter_one_tensor", "avg_integers", "works", "ddp_timing"]


def test_torchneuron_forms_and_gloo_errors_at_four_ranks():
    results = run_ranks("contract.py", 4, SCENARIOS, timeout=300)
    assert_all_ok(results)
    for r in results:
        for marker in ("invalid roots ok", "reduce_scatter one tensor ok", "avg integers ok", "works ok",
                       "ddp timing ok", "done"):
            assert f"rank {r.rank} {marker}" in r.output, report(results)
        # c10d's DDP reducer warns once per process when the device has no timer.
        assert "Time stats" not in r.output, report(results)


def test_a_group_outlives_the_rank_that_hosts_the_store(tmp_path):
    procs = start_ranks("contract.py", 4, ["store_host_leaves"], env={"CONTRACT_MARKER_DIR": str(tmp_path)})
    results = wait_ranks(procs, timeout=180)
    assert all(r.returncode == 0 for r in results), report(results)
    assert "rank 0 store host leaves" in results[0].output, report(results)
    for r in results[1:]:
        assert f"rank {r.rank} store host left ok" in r.output, report(results)


def test_torchrun_with_more_processes_than_cores_names_the_instance_and_a_bigger_one(tmp_path):
    script = tmp_path / "init.py"
    script.write_text("import torch.distributed as dist\nimport torch_neuronx\ndist.init_process_group('neuron')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("NRTSIM_INSTANCE", "NEURON_RT_VISIBLE_CORES")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "5",
                           str(script)], env=env, capture_output=True, text=True, timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "torchrun started 5 processes on this host" in out, out[-3000:]
    assert "has 4 logical NeuronCores" in out and "NRTSIM_INSTANCE=trn1.32xlarge (32 cores)" in out, out[-3000:]
    assert "NEURON_RT_VISIBLE_CORES='4' names core" not in out, out[-3000:]
