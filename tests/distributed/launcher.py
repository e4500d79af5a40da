"""Starts the ranks of a distributed test as separate processes, the way torchrun does (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), each seeing its own NeuronCore
(NEURON_RT_VISIBLE_CORES=rank), and collects their exit codes and output."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RankResult:
    rank: int
    pid: int
    returncode: int
    output: str


def start_ranks(worker: str, world_size: int, args=(), env: dict | None = None):
    port = free_port()
    procs = []
    for rank in range(world_size):
        e = dict(os.environ)
        e.update(
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            NEURON_RT_VISIBLE_CORES=str(rank % 4),
            OMP_NUM_THREADS="1",
            PYTHONWARNINGS="ignore",
        )
        e.update(env or {})
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKERS / worker), *map(str, args)],
                env=e,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def wait_ranks(procs, timeout: float = 120) -> list[RankResult]:
    deadline = time.monotonic() + timeout
    results = []
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += f"\n[launcher] rank {rank} killed after the {timeout} s limit"
        results.append(RankResult(rank, p.pid, p.returncode, out))
    return results


def wait_groups(procs, timeout):
    """Waits for processes started each in a session of its own (start_new_session=True), killing
    every process group at the limit; their RankResults in order."""
    deadline = time.monotonic() + timeout
    results = []
    for i, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                try:
                    os.killpg(q.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            out, _ = p.communicate()
            out += f"\n[launcher] process {i} killed after the {timeout} s limit"
        results.append(RankResult(i, p.pid, p.returncode, out))
    return results


def run_ranks(worker: str, world_size: int, args=(), env=None, timeout: float = 120):
    return wait_ranks(start_ranks(worker, world_size, args, env), timeout)


def report(results) -> str:
    return "\n".join(f"--- rank {r.rank} (exit {r.returncode}) ---\n{r.output[-4000:]}" for r in results)


def assert_all_ok(results):
    assert all(r.returncode == 0 for r in results), report(results)


def torchrun(script, nproc, args=(), env=None, timeout=300):
    """Runs `script` under torchrun (the launcher users have), one rank per core. torchrun itself
    sets LOCAL_RANK and TORCHELASTIC_RUN_ID, from which torch_neuronx sets NEURON_RT_VISIBLE_CORES."""
    e = dict(os.environ)
    e.pop("NEURON_RT_VISIBLE_CORES", None)
    e.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    e.update(env or {})
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc-per-node={nproc}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        str(script), *map(str, args),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=e, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"torchrun {script} exited {proc.returncode}:\n{out[-6000:]}"
    return out
