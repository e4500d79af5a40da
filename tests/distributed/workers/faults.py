"""Fault scenarios. argv[1] names one; every surviving rank must raise a clear DistBackendError
within the group's timeout (never hang), naming the problem and what to do, and print what it saw."""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
SCENARIO = sys.argv[1]
TIMEOUT = timedelta(seconds=float(os.environ.get("FAULT_TIMEOUT_S", "4")))


def expect_failure(fn, *needles):
    start = time.monotonic()
    try:
        fn()
    except dist.DistBackendError as e:
        elapsed = time.monotonic() - start
        message = str(e)
        missing = [n for n in needles if n not in message]
        assert not missing, f"error lacks {missing}: {message}"
        print(f"rank {RANK} raised after {elapsed:.2f} s: {message[:300]}", flush=True)
        return elapsed
    raise AssertionError(f"rank {RANK}: no error")


def main():
    dist.init_process_group("neuron", timeout=TIMEOUT)
    x = torch.ones(1000, device="neuron")
    dist.all_reduce(x)  # everyone is up and the segment is mapped (and already unlinked)
    print(f"rank {RANK} pid {os.getpid()} ready", flush=True)
    if SCENARIO == "sigkill":
        if RANK == WORLD - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        elapsed = expect_failure(lambda: dist.all_reduce(x), f"rank {WORLD - 1}", "exited", "its own output says why")
        assert elapsed < TIMEOUT.total_seconds(), elapsed
    elif SCENARIO == "hang":
        if RANK == WORLD - 1:
            time.sleep(60)  # the test kills this rank once the others have reported
            return
        elapsed = expect_failure(lambda: dist.all_reduce(x), "timed out", "give the group a longer timeout")
        assert elapsed < TIMEOUT.total_seconds() + 2, elapsed
    elif SCENARIO == "p2p_dead_peer":
        if RANK == 1:
            os._exit(3)  # dies before sending
        if RANK == 0:
            t = torch.empty(10, device="neuron")
            expect_failure(lambda: dist.recv(t, src=1), "rank 1", "exited", "its own output says why")
    elif SCENARIO == "destroy_and_reinit":
        dist.destroy_process_group()
        dist.init_process_group("neuron", timeout=TIMEOUT)
        y = torch.full((3,), float(RANK), device="neuron")
        dist.all_reduce(y)
        assert y.cpu().tolist() == [float(sum(range(WORLD)))] * 3
        dist.destroy_process_group()
        # A backend per device: neuron tensors on the neuron group, CPU tensors on Gloo.
        dist.init_process_group("cpu:gloo,neuron:neuron", timeout=TIMEOUT)
        assert dist.get_backend() == "cpu:gloo,neuron:neuron", dist.get_backend()
        y = torch.full((3,), float(RANK), device="neuron")
        z = torch.full((2,), float(RANK))
        dist.all_reduce(y)
        dist.all_reduce(z)
        assert y.cpu().tolist() == [float(sum(range(WORLD)))] * 3
        assert z.tolist() == [float(sum(range(WORLD)))] * 2
        dist.destroy_process_group()
        print(f"rank {RANK} reinit ok", flush=True)
        return
    elif SCENARIO == "abort":
        if RANK == 0:
            backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("neuron"))
            backend._abort_transport()
        expect_failure(dist.barrier, "aborted by rank 0", "destroy it and create a new one")
    else:
        raise SystemExit(f"unknown scenario {SCENARIO}")
    # Survivors end without the collective teardown (peers are gone).
    os._exit(0)


if __name__ == "__main__":
    main()
