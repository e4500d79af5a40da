"""DDP, FSDP2 (bf16 MixedPrecisionPolicy), DTensor tensor + sequence parallel, functional
collectives (eager and compiled) and the 2-D TP x FSDP mesh on the neuron process group, each against a single-process CPU float32 run of
the same tiny Llama (workers/parallel.py). The 2-rank scenarios share one launch: starting ranks
costs more than most scenarios."""

from launcher import assert_all_ok, run_ranks

TWO_RANK = {
    "ddp": "DDP ok",
    "fsdp2": "FSDP2 bf16 ok",
    "tp": "TP+SP ok",
    "funcol": "funcol eager and compiled ok",
}


def test_two_rank_parallelism_matches_single_process():
    results = run_ranks("parallel.py", 2, list(TWO_RANK), timeout=300)
    assert_all_ok(results)
    for r in results:
        for scenario, marker in TWO_RANK.items():
            assert marker in r.output, f"{scenario} did not report on rank {r.rank}:\n{r.output[-3000:]}"


def test_2d_tp_fsdp_on_four_ranks_matches_single_process():
    results = run_ranks("parallel.py", 4, ["2d"], timeout=300)
    assert_all_ok(results)
    assert all("2-D TPxFSDP ok" in r.output for r in results)
