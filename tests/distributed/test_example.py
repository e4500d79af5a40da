"""The TP x FSDP fine-tuning example at 4 ranks (TP=2 x FSDP=2) under torchrun, as `make test`
runs it; `make finetune-32` runs the same script at 32 ranks. The example itself checks that the
transformers checkpoint it writes reloads on CPU with the same logits."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_finetune_example_at_four_ranks(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("NEURON_RT_VISIBLE_CORES", None)  # torchrun's LOCAL_RANK chooses each rank's core
    out = tmp_path / "ckpt"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
         str(ROOT / "examples" / "distributed" / "finetune_tp_fsdp.py"), "--tp", "2", "--steps", "2",
         "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    assert "reloaded on CPU" in proc.stdout, proc.stdout
    assert (out / "config.json").exists()
