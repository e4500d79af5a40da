"""The neuron process group's collectives, point to point, object collectives, subgroups, launch
records and mismatch errors, at 4 ranks (one process per NeuronCore). The checks themselves run in
workers/collectives.py against CPU references built from every rank's inputs."""

from launcher import assert_all_ok, run_ranks


def test_every_collective_matches_cpu_at_four_ranks():
    results = run_ranks("collectives.py", 4, timeout=240)
    assert_all_ok(results)
    assert all(f"rank {r.rank} ok" in r.output for r in results)
