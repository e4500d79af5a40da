"""neuron:<LOCAL_RANK> with one visible core per process (the torchrun layout): the device API,
init_process_group(device_id=...), barrier(device_ids=[...]), collectives and DDP on tensors made
on neuron:<LOCAL_RANK> (workers/local_rank.py), at 3 ranks, so that ranks 1 and 2 use the alias."""

from launcher import assert_all_ok, run_ranks


def test_local_rank_index_names_the_one_visible_core_at_three_ranks():
    results = run_ranks("local_rank.py", 3, timeout=180)
    assert_all_ok(results)
    assert all(f"rank {r.rank} local rank ok" in r.output for r in results)
