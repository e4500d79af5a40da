"""recv / irecv without a source (c10d's recvAnysource) at 3 ranks, run once with the backend in
argv[1] ("neuron" on neuron tensors, or "gloo" on CPU tensors as the reference): rank 0 prints
what it received as one JSON line (source rank, tag, values), which the test compares between the
two backends and with the known answer. Every ordering below is forced by causality (a rank sends
only after a word from rank 0), so both backends must give exactly the same sequence."""

import json
import os
import sys

import torch
import torch.distributed as dist

import torch_neuronx

RANK = int(os.environ["RANK"])
BACKEND = sys.argv[1]
DEV = torch.device("neuron") if BACKEND == "neuron" else torch.device("cpu")
GO = 9
N = 300_000  # 1.2 MB of float32: more than one pass through the neuron transport's 1 MiB ring


def go(dst):
    dist.send(torch.ones(1, device=DEV), dst=dst, tag=GO)


def wait_go():
    dist.recv(torch.empty(1, device=DEV), src=0, tag=GO)


def payload(rank):
    return torch.arange(N, dtype=torch.float32, device=DEV) + 1000 * rank


def rank0():
    got = []
    # 1. Rank 2 sends first (rank 1 waits for our word): recv without src returns 2, then 1.
    for expect_later in (1, None):
        t = torch.empty(N, device=DEV)
        src = dist.recv(t)
        ok = torch.equal(t.cpu(), payload(src).cpu())
        got.append(["recv", src, 0, ok])
        if expect_later is not None:
            go(expect_later)
    # 2. One sender's messages of one tag arrive in order, with or without src.
    a = torch.empty(2, dtype=torch.bfloat16, device=DEV)
    src = dist.recv(a, tag=4)
    got.append(["recv", src, 4, a.float().cpu().tolist()])
    src = dist.recv(a, src=1, tag=4)
    got.append(["recv src=1", src, 4, a.float().cpu().tolist()])
    # 3. Tags select the message: rank 1 sends tag 7, rank 2 tag 3 (after our words to both).
    go(1)
    go(2)
    b = torch.empty(1, dtype=torch.int64, device=DEV)
    for tag in (3, 7):
        src = dist.recv(b, tag=tag)
        got.append(["recv", src, tag, b.cpu().tolist()])
    # 4. irecv without src: the Work names the sender once waited on.
    w = dist.irecv(b, tag=5)
    go(2)
    w.wait()
    got.append(["irecv", w._source_rank(), 5, b.cpu().tolist()])
    return got


def others():
    if RANK == 1:
        wait_go()
    dist.send(payload(RANK), dst=0)
    if RANK == 1:
        works = [dist.isend(torch.tensor([v, v + 0.5], dtype=torch.bfloat16, device=DEV), dst=0, tag=4) for v in (41.0, 42.0)]
        for w in works:
            w.wait()
        wait_go()
        dist.send(torch.tensor([7], device=DEV), dst=0, tag=7)
    else:
        wait_go()
        dist.send(torch.tensor([3], device=DEV), dst=0, tag=3)
        wait_go()
        dist.send(torch.tensor([5], device=DEV), dst=0, tag=5)


def check_neuron_record():
    # Each receive is one launch record (the bytes it takes in over the link).
    torch_neuronx.clear_kernel_trace()
    t = torch.empty(4, device=DEV)
    if RANK == 0:
        dist.recv(t)
        rec = [r for r in torch_neuronx.kernel_trace() if r["op"] == "c10d::recv_any_source"]
        assert len(rec) == 1 and rec[0]["kind"] == "collective" and rec[0]["bytes_written"] == 16, rec
    elif RANK == 1:
        dist.send(t.fill_(1.0), dst=0)


def across_hosts():
    # Each rank its own simulated host: the group spans hosts, where recv without a source is
    # refused with a clear error (the group stays usable).
    os.environ["NRTSIM_HOST_ID"] = f"any-source-host-{RANK}"
    dist.init_process_group("neuron")
    if RANK == 0:
        try:
            dist.recv(torch.empty(1, device=DEV))
        except dist.DistBackendError as e:
            assert "several hosts" in str(e) and "pass src=" in str(e), str(e)
        else:
            raise AssertionError("recv without a source across hosts did not raise")
    x = torch.ones(2, device=DEV)
    dist.all_reduce(x)
    assert torch.equal(x.cpu(), torch.full((2,), float(dist.get_world_size())))
    dist.destroy_process_group()
    print(f"rank {RANK} any source ok", flush=True)


def main():
    if len(sys.argv) > 2 and sys.argv[2] == "across-hosts":
        return across_hosts()
    dist.init_process_group(BACKEND)
    result = rank0() if RANK == 0 else others()
    if BACKEND == "neuron":
        check_neuron_record()
    dist.barrier()
    if RANK == 0:
        print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()
    print(f"rank {RANK} any source ok", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
