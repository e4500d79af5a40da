"""The neuron process group across hosts (issue 11, item 5).

Two network namespaces joined by a bridge are two hosts (namespaces.py): each runs
`torchrun --nnodes=2 --nproc-per-node=2 --node-rank=i` in its namespace (and its own UTS
namespace, hostname host0 / host1). The 4 ranks check every collective against expected values,
then train the tiny Llama with DDP and with FSDP2 (bf16 MixedPrecisionPolicy) against a
single-process run (workers/parallel.py's checks). A rank killed on the other host fails every
survivor within the group's timeout.

The namespace tests need root and `ip`; without them they are skipped with the reason. The
hierarchical path itself is also tested without namespaces: NRTSIM_HOST_ID tells plain processes
on this machine which simulated host they are on (three hosts, interleaved ranks)."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import namespaces
from launcher import free_port, report, wait_groups

WORKER = Path(__file__).parent / "workers" / "two_hosts.py"
ADDRESSES = ("10.213.0.1", "10.213.0.2")


@pytest.fixture
def two_hosts():
    """Two network namespaces on one bridge (namespaces.py); yields their names. Always removed."""
    try:
        with namespaces.hosts(2) as made:
            assert tuple(a for _, a in made) == ADDRESSES
            yield [ns for ns, _ in made]
    except namespaces.NamespacesUnavailable as e:
        print(f"SKIPPED: {e}")
        pytest.skip(str(e))


_env = namespaces.clean_env
_in_namespace = namespaces.in_namespace




def _torchrun(names, scenarios, timeout=150):
    port = free_port()
    procs = []
    for node, (ns, address) in enumerate(zip(names, ADDRESSES)):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
                f"--node-rank={node}", f"--master-addr={ADDRESSES[0]}", f"--master-port={port}",
                str(WORKER), *scenarios]
        procs.append(subprocess.Popen(_in_namespace(ns, f"host{node}", argv), env=_env(),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    return wait_groups(procs, timeout)


def test_torchrun_on_two_hosts_collectives_ddp_fsdp2(two_hosts):
    results = _torchrun(two_hosts, ["collectives", "records", "ddp", "fsdp2"])
    assert all(r.returncode == 0 for r in results), report(results)
    out = "\n".join(r.output for r in results)
    for rank in range(4):
        for marker in ("two-host collectives ok", "two-host records ok", "DDP ok", "FSDP2 bf16 ok", "done"):
            assert f"rank {rank} {marker}" in out, f"rank {rank} did not report '{marker}':\n{report(results)}"


def _plain_ranks(hosts, scenarios, netns=None, timeout=120, fault_timeout=None):
    """One process per rank; rank r on host hosts[r] (NRTSIM_HOST_ID, or network namespace)."""
    port = free_port()
    master = ADDRESSES[0] if netns else "127.0.0.1"
    local = {h: [r for r, x in enumerate(hosts) if x == h] for h in hosts}
    procs = []
    for rank, h in enumerate(hosts):
        extra = dict(RANK=str(rank), WORLD_SIZE=str(len(hosts)), LOCAL_RANK=str(local[h].index(rank)),
                     MASTER_ADDR=master, MASTER_PORT=str(port), NEURON_RT_VISIBLE_CORES=str(local[h].index(rank)),
                     TWO_HOSTS_LOCAL=str(len(local[h])), TWO_HOSTS_HOSTS=str(len(local)))
        if fault_timeout:
            extra["FAULT_TIMEOUT_S"] = str(fault_timeout)
        argv = [sys.executable, str(WORKER), *scenarios]
        if netns:
            argv = _in_namespace(netns[h], f"host{h}", argv)
        else:
            extra["NRTSIM_HOST_ID"] = f"sim-host-{h}"
        procs.append(subprocess.Popen(argv, env=_env(**extra), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, start_new_session=True))
    return procs, wait_groups(procs, timeout)


def test_three_simulated_hosts_interleaved_collectives():
    # Ranks 0 and 2 share a host, 1 and 3 are alone on theirs: unequal hosts (the leaders'
    # all-gather pads), interleaved ranks, one-rank hosts, a root that is no leader.
    # The launch records' NeuronLink and EFA bytes on those unequal hosts. Then a size mismatch
    # between hosts: every rank raises.
    _, results = _plain_ranks([0, 1, 0, 2], ["collectives", "records", "mismatch"])
    assert all(r.returncode == 0 for r in results), report(results)
    for marker in ("two-host collectives ok", "two-host records ok", "two-host mismatch ok"):
        assert all(f"rank {r.rank} {marker}" in r.output for r in results), report(results)


def _segments(pids):
    return [n for n in os.listdir("/dev/shm") if any(re.fullmatch(rf"nrtsim-c10d-{p}-[0-9a-f]+", n) for p in pids)]


@pytest.mark.parametrize("victim", [3, 2], ids=["non-leader", "leader"])
def test_killed_rank_on_the_other_host_fails_every_survivor(victim, request):
    """Rank 3 (no leader) or 2 (leader of host 1) is SIGKILLed in an allreduce: ranks 0 and 1 on
    host 0 and the other rank of host 1 raise within the 20 s group timeout."""
    if victim == 3:
        netns = request.getfixturevalue("two_hosts")
    else:
        netns = None  # the same over loopback, hosts named by NRTSIM_HOST_ID
    start = time.monotonic()
    procs, results = _plain_ranks([0, 0, 1, 1], [f"sigkill:{victim}"], netns, timeout=90, fault_timeout=20)
    elapsed = time.monotonic() - start
    for r in results:
        if r.rank == victim:
            continue
        assert r.returncode == 0, report(results)
        assert "raised after" in r.output, report(results)
    assert elapsed < 80, report(results)
    assert _segments([p.pid for p in procs]) == []
