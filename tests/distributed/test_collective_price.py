"""One price for a collective: real collectives' launch records on the simulated clock against the
estimate's figure for the same bytes, ranks and instance (workers/collective_price.py). Two ranks
of a trn2.48xlarge share one chip (through HBM); four of a trn1.32xlarge, two cores per chip,
cross NeuronLink-v2 between two chips (mesh and recursive doubling-halving by size)."""

import pytest
from launcher import assert_all_ok, run_ranks


@pytest.mark.parametrize("instance, ranks, links", [("trn2.48xlarge", 2, "HBM (one chip)"),
                                                    ("trn1.32xlarge", 4, "NeuronLink-v2 (rdh)")])
def test_the_clock_charges_a_collective_what_the_estimate_prices_it(instance, ranks, links):
    results = run_ranks("collective_price.py", ranks, env={"NRTSIM_INSTANCE": instance}, timeout=180)
    assert_all_ok(results)
    for r in results:
        assert f"rank {r.rank} prices agree" in r.output, r.output[-2000:]
        assert links in r.output, r.output[-2000:]
