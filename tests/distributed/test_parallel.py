"""DDP, FSDP2 (bf16 MixedPrecisionPolicy), DTensor tensor + sequence parallel, the 2-D TP x FSDP
mesh and functional collectives (eager and compiled) on the neuron process group, each against a
single-process CPU float32 run of the same tiny Llama (workers/parallel.py)."""

import pytest
from launcher import assert_all_ok, run_ranks


@pytest.mark.parametrize("scenario", ["ddp", "fsdp2", "tp"])
def test_two_rank_parallelism_matches_single_process(scenario):
    results = run_ranks("parallel.py", 2, [scenario], timeout=240)
    assert_all_ok(results)
    assert all(" ok" in r.output for r in results)


def test_2d_tp_fsdp_on_four_ranks_matches_single_process():
    results = run_ranks("parallel.py", 4, ["2d"], timeout=300)
    assert_all_ok(results)
    assert all("2-D TPxFSDP ok" in r.output for r in results)


def test_functional_collectives_eager_and_inside_torch_compile():
    results = run_ranks("parallel.py", 2, ["funcol"], timeout=240)
    assert_all_ok(results)
    assert all("funcol eager and compiled ok" in r.output for r in results)
