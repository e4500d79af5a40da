"""One price for a collective: real collectives' launch records on the simulated clock against the
estimate's figure for the same bytes, ranks and instance (workers/collective_price.py). Two ranks
of a trn2.48xlarge share one chip (through HBM); four of a trn1.32xlarge, two cores per chip,
cross NeuronLink-v2 between two chips (mesh and recursive doubling-halving by size); six of a
trn1.32xlarge on two simulated hosts of three (NRTSIM_HOST_ID) cross NeuronLink-v2 inside each and
EFA between them, the hierarchical all-gather and reduce-scatter included."""

import pytest
from launcher import assert_all_ok, run_ranks


@pytest.mark.parametrize("instance, ranks, per_host, links",
                         [("trn2.48xlarge", 2, 2, "HBM (one chip)"),
                          ("trn1.32xlarge", 4, 4, "NeuronLink-v2 (rdh)"),
                          ("trn1.32xlarge", 6, 3, "NeuronLink-v2 (mesh) + EFA")],
                         ids=["one-chip", "two-chips", "two-hosts"])
def test_the_clock_charges_a_collective_what_the_estimate_prices_it(instance, ranks, per_host, links):
    env = {"NRTSIM_INSTANCE": instance, "PRICE_RANKS_PER_HOST": str(per_host)}
    results = run_ranks("collective_price.py", ranks, env=env, timeout=240)
    assert_all_ok(results)
    for r in results:
        assert f"rank {r.rank} prices agree" in r.output, r.output[-2000:]
        assert links in r.output, r.output[-2000:]
