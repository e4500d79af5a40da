"""The parallelism ecosystem above the neuron process group, each against a single-process run:
the TP x FSDP fine-tune example (examples/tp_fsdp_finetune.py) at 4 ranks, the way `make
finetune-32` runs it at 32; pipeline parallelism, distributed checkpoint resharding and
activation checkpointing (workers/eco_parallel.py); Accelerate, transformers' tensor-parallel
loading and TRL's SFTTrainer with FSDP2 (workers/eco_hf.py); torchtitan's Llama 3 debug model
with FSDP2 + TP (workers/eco_titan.py, run by `make test-torchtitan`)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launcher import ROOT, assert_all_ok, report, run_ranks, torchrun



HF = Path(__file__).parent / "workers" / "eco_hf.py"
# Every core visible, each rank taking its local rank's (eco_hf.bind_local_core), as a CUDA script
# takes its GPU: the SFT test runs in that layout, the others in the one-core-per-process default
# (where neuron:LOCAL_RANK names the process's one core), so both stay covered.
ALL_CORES = {"TORCH_NEURONX_KEEP_VISIBLE_CORES": "1"}




def test_tp_fsdp_finetune_example_matches_single_process_and_saves_a_cpu_checkpoint(tmp_path):
    metrics = tmp_path / "metrics.json"
    out = torchrun(
        ROOT / "examples" / "tp_fsdp_finetune.py",
        4,
        ["--tp", 2, "--steps", 3, "--verify", "--out", tmp_path / "ckpt", "--metrics", metrics],
    )
    assert "verified against one CPU process" in out, out[-3000:]
    m = json.loads(metrics.read_text())
    assert (m["world"], m["tp"], m["fsdp"]) == (4, 2, 2)
    assert len(m["losses"]) == 3 and m["losses"][-1] < m["losses"][0]
    # A plain transformers checkpoint: config + safetensors, no DTensor or FSDP names in it.
    from safetensors import safe_open

    with safe_open(str(tmp_path / "ckpt" / "model.safetensors"), "pt") as f:
        names = list(f.keys())
        assert "model.layers.0.self_attn.q_proj.weight" in names
        # The full shape, not a TP or FSDP shard: intermediate x hidden of the TP=2 config.
        assert tuple(f.get_slice("model.layers.1.mlp.gate_proj.weight").get_shape()) == (64, 32)
    assert not any("_fsdp" in n or "_orig_mod" in n for n in names)


@pytest.fixture(scope="module")
def parallel_runs(tmp_path_factory):
    """Pipeline, DCP and activation checkpointing share one 2-rank launch (CI time); each test
    below checks its own scenario's line on every rank."""
    results = run_ranks("eco_parallel.py", 2, ["pp,dcp,ac", tmp_path_factory.mktemp("dcp")], timeout=300)
    return results


def check_scenario(results, marker):
    assert all(marker in r.output for r in results), report(results)


def test_two_stage_pipeline_gpipe_and_1f1b_match_single_process(parallel_runs):
    for schedule in ("ScheduleGPipe", "Schedule1F1B"):
        check_scenario(parallel_runs, f"{schedule} 2-stage pipeline ok")


def test_dcp_saved_under_fsdp2_loads_under_tp_and_unsharded(parallel_runs):
    check_scenario(parallel_runs, "DCP FSDP2 -> TP -> single process ok")


def test_activation_checkpointing_under_fsdp2_matches_single_process(parallel_runs):
    check_scenario(parallel_runs, "FSDP2 + activation checkpointing ok")


def test_parallel_scenarios_exit_cleanly(parallel_runs):
    assert_all_ok(parallel_runs)


def test_accelerate_detects_multi_neuron_and_transformers_loads_with_tensor_parallelism(tmp_path):
    out = torchrun(HF, 2, ["accelerate-tp", tmp_path])  # one visible core per process
    assert out.count("accelerate MULTI_NEURON ok; transformers TP=2 loading ok") == 2, out[-3000:]


def test_trl_sft_trainer_with_fsdp2_matches_one_cpu_process(tmp_path):
    from safetensors.torch import load_file

    # The single-process CPU run and the 2-rank FSDP2 run, side by side.
    reference = subprocess.Popen(
        [sys.executable, str(HF), "sft-reference", str(tmp_path)],
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    torchrun(HF, 2, ["sft", tmp_path], env=ALL_CORES)
    ref_out, _ = reference.communicate(timeout=300)
    assert reference.returncode == 0, ref_out[-4000:]
    got, want = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("fsdp2", "reference"))
    assert got["distributed_type"] == "DistributedType.FSDP" and got["world"] == 2
    # fp32 on both sides: the losses (token means) differ only by summation order.
    assert len(got["losses"]) == len(want["losses"]) == 4
    for a, b in zip(got["losses"], want["losses"]):
        assert math.isclose(a, b, rel_tol=1e-5), (got["losses"], want["losses"])
    # AdamW (lr 1e-2, eps 1e-8): where a gradient element is near zero an absolute gradient error
    # delta moves the update g / (sqrt(v) + eps) by up to lr * delta / eps; float32 sums of this
    # tiny model's per-token terms leave delta ~1e-11 outside rare cancellations, so <= 2e-3 * lr
    # per step, plus a few half-ulps (2^-24) of an O(1) parameter (the same bound as the example).
    atol = 4 * (2e-3 * 1e-2 + 4 * 2.0**-24)
    a = load_file(str(tmp_path / "fsdp2-model" / "model.safetensors"))
    b = load_file(str(tmp_path / "reference-model" / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in b:
        assert a[name].shape == b[name].shape, name  # the full tensor, not an FSDP shard
        diff = (a[name] - b[name]).abs().max().item()
        assert diff <= atol, f"{name}: FSDP2 on neuron vs one CPU process differ by {diff} (atol {atol})"


def test_device_ids_of_the_local_rank_work_with_one_visible_core_per_process(tmp_path):
    # neuron:LOCAL_RANK names the process's one core (neuron:0) on every rank.
    out = torchrun(HF, 2, ["device-ids", tmp_path], timeout=120)
    assert out.count("device ids ok") == 2


TORCHTITAN_SITE = os.environ.get("TORCH_NEURONX_TORCHTITAN_SITE")


@pytest.mark.skipif(
    not TORCHTITAN_SITE,
    reason="torchtitan is kept out of .venv (its pins clash with the Hugging Face stack's): "
    "`make test-torchtitan` installs requirements/torchtitan.txt apart and runs this test",
)
def test_torchtitan_llama3_debug_model_fsdp2_tp_matches_one_process(tmp_path):
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [TORCHTITAN_SITE, os.environ.get("PYTHONPATH")]))}
    titan = Path(__file__).parent / "workers" / "eco_titan.py"
    # One seed checkpoint for both layouts (torchtitan's way to start sharded runs from the same
    # weights), then one process without parallelism, then TP=2 x FSDP=2 on 4 ranks.
    torchrun(titan, 1, [tmp_path, "--seed-checkpoint"], env=env)
    single_out = torchrun(titan, 1, [tmp_path], env=env)
    parallel_out = torchrun(titan, 4, [tmp_path, "--tp", 2], env=env, timeout=400)
    single = json.loads((tmp_path / "losses-1.json").read_text())
    parallel = json.loads((tmp_path / "losses-4.json").read_text())
    assert len(single) == len(parallel) == 4, (single_out[-2000:], parallel_out[-2000:])
    assert parallel[-1] < parallel[0]
    # float32 parameters and compute on both sides; they differ by summation order only (TP's
    # row-parallel sums, FSDP2's reduce-scatter of 2 replicas): a few float32 roundings per op
    # (~1e-7 relative) through 6 layers and 4 AdamW steps; 1e-5 relative leaves room.
    for a, b in zip(parallel, single):
        assert math.isclose(a, b, rel_tol=1e-5), (parallel, single)
