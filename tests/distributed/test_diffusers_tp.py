"""Diffusers with tensor parallelism (issue 31, item 1): the FLUX.1, FLUX.2, Qwen-Image and
Qwen-Image 2.1 transformers loaded with `parallel_config=TensorParallelConfig(tp_degree=4)` (or
made parallel with `enable_parallelism`) on 4 neuron ranks under torchrun, float32 and bfloat16,
each against the same model in one CPU process within the bound the arithmetic gives
(workers/diffusers_tp.py says how it is derived). The whole pipeline with TP runs in
examples/diffusers_tp.py (test below)."""

import re
import sys
from pathlib import Path

import pytest

from launcher import ROOT, torchrun

pytest.importorskip("diffusers")

WORKER = Path(__file__).parent / "workers" / "diffusers_tp.py"


def test_flux_flux2_qwen_image_transformers_with_tp4_match_one_cpu_process(tmp_path):
    out = torchrun(WORKER, 4, [tmp_path], timeout=600)
    for rank in range(4):
        assert f"rank {rank} diffusers tp ok" in out, out[-4000:]
    lines = re.findall(r"rank 0 (\S+ \S+ \S+): diff", out)
    assert len(lines) == 8, out[-4000:]  # 4 models x float32, bfloat16


def test_diffusers_tp_example_saves_the_image(tmp_path):
    image = tmp_path / "image.png"
    out = torchrun(ROOT / "examples" / "diffusers_tp.py", 4, ["--out", image, "--steps", 2, "--check"], timeout=600)
    assert image.exists(), out[-4000:]
    assert "saved" in out and "check: max |TP on neuron - one CPU process|" in out, out[-4000:]

    from PIL import Image

    assert Image.open(image).size == (32, 32)
