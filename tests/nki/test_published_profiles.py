"""The timeline against AWS's published profiles (bench/nki_profiles.py): the matrix-multiplication
tutorial's four kernels at [4096, 8192] @ [8192, 8192] BF16 on trn1 within +-25% of their
published latencies, DMA-bound and compute-bound alike; and AWS's free-dimension-blocked FP32
kernel on trn2, which over-subscribes SBUF, spills as AWS's compiler does instead of being
refused. Modelled times are deterministic: these are known answers, not wall-clock timings."""

import importlib.util
import os

import pytest
import torch


ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _profiles():
    spec = importlib.util.spec_from_file_location("nki_profiles",
                                                  os.path.join(ROOT, "bench", "nki_profiles.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


P = _profiles()


@pytest.mark.parametrize("name,fn", P.KERNELS, ids=[n for n, _ in P.KERNELS])
def test_trn1_bf16_latency_within_25_percent_of_published(name, fn):
    run, spills, _ = P.profile(fn, "trn1", torch.bfloat16)
    ratio = run.makespan_ns / 1e6 / P.PUBLISHED_TRN1_BF16_MS[name]
    assert 0.75 <= ratio <= 1.25, f"{name}: modelled / published = {ratio:.2f}"
    assert spills == 0


def test_block_free_fp32_on_trn2_spills_instead_of_failing():
    run, warned, _ = P.profile(P.block_free, "trn2", torch.float32)  # no NkiError
    assert warned == 1  # one NkiSpillWarning for the specialisation
    assert run.spills and run.makespan_ns > 0
