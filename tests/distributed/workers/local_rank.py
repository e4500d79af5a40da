"""One visible core per process (NEURON_RT_VISIBLE_CORES=LOCAL_RANK, torchrun's layout), named the
way code written for every core visible names it: neuron:<LOCAL_RANK>. That index is a second name
of the process's one core, neuron:0 (see docs/distributed.md, "Device indices")."""

import os
import sys
import tempfile

import torch
import torch.distributed as dist

import torch_neuronx

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
LOCAL_RANK = int(os.environ["LOCAL_RANK"])
MINE = torch.device("neuron", LOCAL_RANK)
ZERO = torch.device("neuron", 0)


def check_device_api():
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == str(LOCAL_RANK)
    assert torch.neuron.device_count() == 1
    torch.neuron.set_device(LOCAL_RANK)  # accelerate / DeviceMesh
    assert torch.neuron.current_device() == 0
    torch.accelerator.set_device_index(LOCAL_RANK)  # transformers' TP loading
    assert torch.accelerator.current_device_index() == 0
    with torch.neuron.device(LOCAL_RANK):
        assert torch.neuron.current_device() == 0
    # Tensors made on either name are on the one device: same-device ops work, .device agrees.
    a = torch.arange(6.0, device=MINE)
    b = torch.ones(6, device=ZERO)
    assert a.device == b.device == ZERO, (a.device, b.device)
    assert torch.equal((a + b).cpu(), torch.arange(6.0) + 1)
    assert a.to(MINE).device == ZERO
    s = torch.neuron.Stream(device=MINE)
    assert s.device == ZERO, s.device
    with torch.neuron.stream(s):
        c = a * 2
    s.synchronize()
    assert torch.equal(c.cpu(), torch.arange(6.0) * 2)
    g = torch.Generator(device=MINE).manual_seed(7)
    h = torch.Generator(device=ZERO).manual_seed(7)
    assert torch.equal(torch.rand(4, device=MINE, generator=g).cpu(), torch.rand(4, device=ZERO, generator=h).cpu())
    assert torch.neuron.memory_allocated(LOCAL_RANK) == torch.neuron.memory_allocated(0) > 0
    torch.neuron.synchronize(LOCAL_RANK)
    # The simulated clock and core model answer for the alias as for neuron:0.
    assert torch_neuronx.simulated_time(LOCAL_RANK) == torch_neuronx.simulated_time(0)
    assert torch_neuronx.core_model(MINE) == torch_neuronx.core_model(ZERO)
    # autograd: a leaf made on neuron:LOCAL_RANK
    w = torch.full((3,), 2.0, device=MINE, requires_grad=True)
    (w * w).sum().backward()
    assert torch.equal(w.grad.cpu(), torch.full((3,), 4.0))
    # An index that is neither neuron:0 nor this core's number is an error naming both.
    other = LOCAL_RANK + 1
    for call in (lambda: torch.neuron.set_device(other), lambda: torch.empty(1, device=torch.device("neuron", other))):
        try:
            call()
        except (ValueError, RuntimeError) as e:
            assert f"neuron:{other} does not exist" in str(e), str(e)
            if LOCAL_RANK > 0:
                assert f"also neuron:{LOCAL_RANK}" in str(e), str(e)
        else:
            raise AssertionError(f"neuron:{other} did not raise")


def check_process_group():
    dist.init_process_group("neuron", device_id=MINE)
    # c10d's barrier allocates its tensor on opts.device, the bound device neuron:LOCAL_RANK.
    dist.barrier()
    dist.barrier(device_ids=[LOCAL_RANK])  # Accelerate's wait_for_everyone
    x = torch.full((5,), float(RANK + 1), device=MINE)
    dist.all_reduce(x)
    assert torch.equal(x.cpu(), torch.full((5,), float(sum(range(1, WORLD + 1)))))
    out = torch.empty(WORLD * 2, device=MINE)
    dist.all_gather_into_tensor(out, torch.full((2,), float(RANK), device=MINE))
    assert torch.equal(out.cpu(), torch.arange(float(WORLD)).repeat_interleave(2))
    objs = [None] * WORLD
    dist.all_gather_object(objs, RANK)
    assert objs == list(range(WORLD))
    # DDP with device_ids=[local_rank], as a CUDA script writes it; the gradient is the mean.
    model = torch.nn.Linear(4, 1, bias=False).to(MINE)
    with torch.no_grad():
        model.weight.fill_(1.0)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[LOCAL_RANK])
    ddp(torch.full((2, 4), float(RANK), device=MINE)).sum().backward()
    # d/dw sum(x @ w) = column sums of x = 2 * rank per element; averaged over ranks.
    want = 2.0 * sum(range(WORLD)) / WORLD
    assert torch.allclose(model.weight.grad.cpu(), torch.full((1, 4), want)), model.weight.grad
    # A device mesh (DeviceMesh calls set_device(LOCAL_RANK) when the runtime is not started).
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("neuron", (WORLD,))
    y = torch.ones(3, device=MINE)
    dist.all_reduce(y, group=mesh.get_group())
    assert torch.equal(y.cpu(), torch.full((3,), float(WORLD)))
    dist.barrier(device_ids=[LOCAL_RANK])
    check_fsdp1()
    dist.destroy_process_group()


def check_fsdp1():
    # FSDP1 with device_id=local_rank, as a CUDA script writes it (an int and a torch.device); the
    # module starts on the CPU and FSDP moves it to the named device.
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    for device_id in (LOCAL_RANK, MINE):
        model = torch.nn.Linear(4, 2, bias=False)
        with torch.no_grad():
            model.weight.fill_(1.0)
        fsdp = FSDP(model, device_id=device_id, use_orig_params=True)
        assert fsdp.compute_device == ZERO, fsdp.compute_device
        out = fsdp(torch.full((3, 4), float(RANK), device=MINE))
        out.sum().backward()
        # Every rank's gradient is the mean over ranks: 3 rows of x, each element RANK.
        with FSDP.summon_full_params(fsdp, with_grads=True):
            want = torch.full((2, 4), 3.0 * sum(range(WORLD)) / WORLD)
            assert torch.allclose(fsdp.weight.grad.cpu(), want), fsdp.weight.grad


def check_load_map_location(tmp_dir):
    # torch.load(map_location=...) naming this core by its instance number, in each form.
    path = os.path.join(tmp_dir, f"rank{RANK}.pt")
    torch.save({"w": torch.arange(4.0, device=MINE)}, path)
    for location in (f"neuron:{LOCAL_RANK}", MINE, {"neuron:0": f"neuron:{LOCAL_RANK}"}):
        loaded = torch.load(path, map_location=location)["w"]
        assert loaded.device == ZERO and torch.equal(loaded.cpu(), torch.arange(4.0)), (location, loaded)


if __name__ == "__main__":
    check_device_api()
    with tempfile.TemporaryDirectory() as tmp_dir:
        check_load_map_location(tmp_dir)
    check_process_group()
    print(f"rank {RANK} local rank ok", flush=True)
    sys.exit(0)
