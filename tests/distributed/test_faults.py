"""Faults: a killed or hung rank makes every survivor raise within the group's timeout, abort and
destroy/re-init are clean, and no shared-memory segment outlives the job, even after SIGKILL."""

import os
import re
import time

from launcher import report, start_ranks, wait_ranks


def segments_of(pids) -> list:
    """/dev/shm entries named after one of `pids` (rank 0 of each group names its segment)."""
    names = os.listdir("/dev/shm")
    return [n for n in names if any(re.fullmatch(rf"nrtsim-c10d-{p}-[0-9a-f]+", n) for p in pids)]


def run(scenario, world, timeout_s=4.0, limit=90):
    procs = start_ranks("faults.py", world, [scenario], env={"FAULT_TIMEOUT_S": str(timeout_s)})
    results = wait_ranks(procs, timeout=limit)
    return procs, results


def test_sigkilled_rank_fails_the_survivors_fast_and_leaves_no_segment():
    start = time.monotonic()
    procs, results = run("sigkill", 3, timeout_s=20)
    assert results[2].returncode == -9, report(results)
    for r in results[:2]:
        assert r.returncode == 0, report(results)
        assert "rank 2" in r.output and "exited" in r.output, report(results)
    # Detected from the dead process, well before the 20 s timeout.
    assert time.monotonic() - start < 40, report(results)
    assert segments_of([p.pid for p in procs]) == []


def test_hung_rank_times_out_on_every_survivor():
    procs = start_ranks("faults.py", 3, ["hang"], env={"FAULT_TIMEOUT_S": "3"})
    survivors = wait_ranks(procs[:2], timeout=60)
    # The hung rank still maps the group's segment: an anonymous memory file of rank 0's, never a
    # file in /dev/shm, so that no way of ending the job can leave one behind.
    maps = open(f"/proc/{procs[2].pid}/maps").read()
    assert f"/memfd:nrtsim-c10d-{procs[0].pid}-" in maps, maps
    assert "/dev/shm/" not in maps, maps
    procs[2].kill()
    procs[2].communicate()
    for r in survivors:
        assert r.returncode == 0, report(survivors)
        assert "timed out" in r.output, report(survivors)
    assert segments_of([p.pid for p in procs]) == []


def test_dead_peer_of_a_recv_and_abort_raise_clearly():
    _, results = run("p2p_dead_peer", 2)
    assert results[1].returncode == 3 and results[0].returncode == 0, report(results)
    assert "exited" in results[0].output, report(results)
    _, results = run("abort", 2)
    assert all(r.returncode == 0 for r in results), report(results)


def test_destroy_then_init_again_is_clean():
    """Destroyed and created again, with "neuron" and then with a backend per device
    ("cpu:gloo,neuron:neuron"); the teardown of either says nothing (torch 2.13 left the second
    kind without a default backend, and destroy_process_group warned about it on every rank)."""
    procs, results = run("destroy_and_reinit", 2)
    assert all(r.returncode == 0 and "reinit ok" in r.output for r in results), report(results)
    assert not any("No backend of type" in r.output for r in results), report(results)
    assert segments_of([p.pid for p in procs]) == []


def test_a_rank_that_never_creates_the_group_is_an_error_at_the_group_timeout():
    # Rank 0 of a 2-rank group whose rank 1 never shows up: the rendezvous waits the group's
    # timeout (not the store's own), then names the missing rank. One process, an in-memory store.
    from datetime import timedelta

    import pytest
    import torch.distributed as dist

    import torch_neuronx  # noqa: F401
    from torch_neuronx._C._distributed import ProcessGroupNeuron

    store = dist.HashStore()
    store.set_timeout(timedelta(minutes=10))  # longer than the group's: the group's must rule
    start = time.monotonic()
    with pytest.raises(dist.DistBackendError, match=r"rank 0 waited 1000 ms for rank 1 of the new group"):
        ProcessGroupNeuron(store, 0, 2, timedelta(seconds=1))
    assert time.monotonic() - start < 30
