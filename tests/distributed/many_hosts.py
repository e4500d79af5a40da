"""The neuron process group at cluster scale, simulated: N hosts (network namespaces on one bridge,
namespaces.py) of R ranks each, `torchrun --nnodes=N --nproc-per-node=R` in every one, running
the cross-host collectives test (workers/two_hosts.py: every collective, every dtype, subgroups,
object collectives, point to point, the launch records' NeuronLink and EFA bytes) with the
scenarios given. `make test-8-hosts` runs 8 hosts of 2 ranks.

    python tests/distributed/many_hosts.py [--hosts 8] [--ranks-per-host 2] [scenario ...]

Needs root, iproute2 and util-linux (namespaces.unavailable() says what is missing); exits 0 when
every rank reported every scenario, else prints each host's output and exits 1."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import namespaces  # noqa: E402
from launcher import free_port, wait_groups  # noqa: E402

WORKER = HERE / "workers" / "two_hosts.py"
MARKERS = {"collectives": "two-host collectives ok", "records": "two-host records ok", "ddp": "DDP ok",
           "fsdp2": "FSDP2 bf16 ok"}


def run(hosts: int, per_host: int, scenarios: list[str], timeout: float) -> int:
    world = hosts * per_host
    start = time.monotonic()
    with namespaces.hosts(hosts, net=8) as made:
        master = made[0][1]
        port = free_port()
        procs = []
        for node, (ns, _) in enumerate(made):
            argv = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={hosts}",
                    f"--nproc-per-node={per_host}", f"--node-rank={node}", f"--master-addr={master}",
                    f"--master-port={port}", str(WORKER), *scenarios]
            env = namespaces.clean_env(TWO_HOSTS_LOCAL=str(per_host), TWO_HOSTS_HOSTS=str(hosts))
            procs.append(subprocess.Popen(namespaces.in_namespace(ns, f"host{node}", argv), env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True))
        print(f"{hosts} hosts x {per_host} ranks started (torchrun in each namespace, master {master}); "
              f"scenarios: {' '.join(scenarios)}", flush=True)
        outputs = [(r.returncode, r.output) for r in wait_groups(procs, timeout - (time.monotonic() - start))]
    text = "\n".join(out for _, out in outputs)
    missing = [f"rank {r} {MARKERS[s]}" for r in range(world) for s in scenarios
               if s in MARKERS and f"rank {r} {MARKERS[s]}" not in text]
    missing += [f"rank {r} done" for r in range(world) if f"rank {r} done" not in text]
    failed = [node for node, (code, _) in enumerate(outputs) if code != 0]
    elapsed = time.monotonic() - start
    if failed or missing:
        for node, (code, out) in enumerate(outputs):
            print(f"--- host {node} (torchrun exit {code}) ---\n{out[-6000:]}")
        print(f"FAILED after {elapsed:.0f} s: hosts {failed} exited with errors; missing reports: "
              f"{missing[:10]}{' ...' if len(missing) > 10 else ''}")
        return 1
    print(f"ok: {world} ranks on {hosts} hosts reported {', '.join(scenarios)} in {elapsed:.0f} s")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--ranks-per-host", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("scenarios", nargs="*", default=["collectives", "records"])
    args = parser.parse_args(argv)
    reason = namespaces.unavailable()
    if reason:
        print(f"cannot simulate hosts here: {reason}")
        return 2
    return run(args.hosts, args.ranks_per_host, args.scenarios, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
