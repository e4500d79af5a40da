"""The parallelism ecosystem above the neuron process group, each against a single-process run:
the TP x FSDP fine-tune example (examples/tp_fsdp_finetune.py) at 4 ranks, the way `make
finetune-tp-fsdp-32` runs it at 32; pipeline parallelism, distributed checkpoint resharding and
activation checkpointing (workers/eco_parallel.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher import assert_all_ok, free_port, run_ranks

ROOT = Path(__file__).resolve().parents[2]


def torchrun(script, nproc, args=(), env=None, timeout=300):
    """Runs `script` under torchrun (the launcher users have), one rank per core. torchrun itself
    sets LOCAL_RANK and TORCHELASTIC_RUN_ID, from which torch_neuronx sets NEURON_RT_VISIBLE_CORES."""
    e = dict(os.environ)
    e.pop("NEURON_RT_VISIBLE_CORES", None)
    e.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    e.update(env or {})
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc-per-node={nproc}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        str(script), *map(str, args),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=e, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"torchrun {script} exited {proc.returncode}:\n{out[-6000:]}"
    return out


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


def test_two_stage_pipeline_gpipe_and_1f1b_match_single_process():
    results = run_ranks("eco_parallel.py", 2, ["pp"], timeout=240)
    assert_all_ok(results)
    for schedule in ("ScheduleGPipe", "Schedule1F1B"):
        assert all(f"{schedule} 2-stage pipeline ok" in r.output for r in results)


def test_dcp_saved_under_fsdp2_loads_under_tp_and_unsharded(tmp_path):
    results = run_ranks("eco_parallel.py", 2, ["dcp", tmp_path], timeout=240)
    assert_all_ok(results)
    assert all("DCP FSDP2 -> TP -> single process ok" in r.output for r in results)


def test_activation_checkpointing_under_fsdp2_matches_single_process():
    results = run_ranks("eco_parallel.py", 2, ["ac"], timeout=240)
    assert_all_ok(results)
    assert all("FSDP2 + activation checkpointing ok" in r.output for r in results)
