"""Simulated hosts on one machine: network namespaces on one bridge.

Each host is a network namespace with its own address on a /24 (10.213.<net>.<h+1>), its veth's
other end on a bridge in a switch namespace of its own (so nothing is added to the machine's own
network), loopback up. A process runs "on host h" through `in_namespace`, which also gives it a
UTS namespace of its own with hostname host<h>, as separate machines have. Processes in different
network namespaces are different hosts to the neuron process group (HostSpan.h): they can neither
reach each other's loopback nor share its transport. Needs root and iproute2 (`ip`) and util-linux
(`unshare`); `unavailable()` says why not."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root (this runs as uid %d)" % os.geteuid()
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if shutil.which("unshare") is None:
        return "the `unshare` command (util-linux) is not installed"
    return None


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class NamespacesUnavailable(RuntimeError):
    pass


@contextlib.contextmanager
def hosts(count: int, net: int = 0):
    """`count` hosts on one bridge; yields [(namespace, address), ...]. Always removed (deleting a
    namespace deletes the veth ends in it, and with them the pairs). Raises NamespacesUnavailable
    with the reason when they cannot be made here."""
    reason = unavailable()
    if reason:
        raise NamespacesUnavailable(reason)
    tag = f"{os.getpid() % 100000}"
    switch = f"nrtsw-{tag}"
    names = [f"nrth-{tag}-{h}" for h in range(count)]
    addresses = [f"10.213.{net}.{h + 1}" for h in range(count)]
    created = []
    try:
        _ip("netns", "add", switch)
        created.append(switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for h, (ns, address) in enumerate(zip(names, addresses)):
            _ip("netns", "add", ns)
            created.append(ns)
            host_end, switch_end = f"nh{tag}h{h}", f"nh{tag}s{h}"  # at most 15 characters
            _ip("link", "add", host_end, "type", "veth", "peer", "name", switch_end)
            _ip("link", "set", host_end, "netns", ns)
            _ip("link", "set", switch_end, "netns", switch)
            _ip("-n", switch, "link", "set", switch_end, "master", "br0")
            _ip("-n", switch, "link", "set", switch_end, "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", host_end)
            _ip("-n", ns, "link", "set", host_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, OSError) as e:
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        detail = (getattr(e, "stderr", "") or str(e)).strip()
        raise NamespacesUnavailable(f"network namespaces cannot be created here: {detail}") from None
    try:
        yield list(zip(names, addresses))
    finally:
        for ns in created:
            done = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if done.returncode != 0:
                print(f"ip netns del {ns}: {done.stderr.strip()}")


def in_namespace(ns: str, hostname: str, argv: list[str]) -> list[str]:
    """argv run in network namespace `ns`, in a UTS namespace of its own named `hostname`."""
    inner = "hostname " + hostname + " && exec " + " ".join(f"'{a}'" for a in argv)
    return ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", inner]


def clean_env(**extra) -> dict:
    """This process's environment without the variables of a rank of another job."""
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "NEURON_RT_VISIBLE_CORES", "TORCHELASTIC_RUN_ID", "NRTSIM_HOST_ID", "GLOO_SOCKET_IFNAME"):
        env.pop(k, None)
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", **extra)
    return env
