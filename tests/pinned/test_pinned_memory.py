"""Pinned host memory for neuron: Tensor.pin_memory(), is_pinned(), pin_memory=True factories,
non-blocking copies from and to pinned memory, the pinned allocator's statistics, and
DataLoader(pin_memory=True)."""

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

pytestmark = pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")


def test_pin_memory_copies_into_pinned_memory():
    x = torch.randn(33, 7)
    p = x.pin_memory()
    assert p.is_pinned()
    assert not x.is_pinned()
    assert p.data_ptr() != x.data_ptr()
    assert p.device == torch.device("cpu")
    assert torch.equal(p, x)
    # Already pinned: returned as is.
    assert p.pin_memory().data_ptr() == p.data_ptr()


def test_views_of_pinned_memory_are_pinned():
    p = torch.arange(1000.0).pin_memory()
    assert p[500:].is_pinned()
    assert p.view(10, 100)[3].is_pinned()
    assert p[999:].is_pinned()  # the last element is still inside the pinned block
    assert not p.clone().is_pinned()  # a copy is ordinary memory


@pytest.mark.parametrize(
    "factory",
    [
        lambda: torch.empty(10, pin_memory=True),
        lambda: torch.zeros(3, 4, pin_memory=True),
        lambda: torch.ones(5, dtype=torch.bfloat16, pin_memory=True),
        lambda: torch.empty_like(torch.randn(6), pin_memory=True),
        lambda: torch.randn(8, pin_memory=True),
    ],
)
def test_pinned_factories(factory):
    t = factory()
    assert t.is_pinned()
    assert t.device.type == "cpu"


def test_pinned_factory_values():
    z = torch.zeros(3, 4, pin_memory=True)
    assert torch.equal(z, torch.zeros(3, 4))
    o = torch.ones(5, dtype=torch.bfloat16, pin_memory=True)
    assert torch.equal(o, torch.ones(5, dtype=torch.bfloat16))


def test_untyped_storage_pin_memory():
    s = torch.UntypedStorage(64).pin_memory()
    assert s.is_pinned()
    assert not torch.UntypedStorage(64).is_pinned()


def test_non_blocking_host_to_device_from_pinned():
    torch.manual_seed(0)
    x = torch.randn(128, 64)
    p = x.pin_memory()
    n = p.to("neuron", non_blocking=True)
    n1 = p.to("neuron:1", non_blocking=True)
    torch.neuron.synchronize()
    torch.neuron.synchronize(1)
    assert n.device == torch.device("neuron:0") and n1.device == torch.device("neuron:1")
    assert torch.equal(n.cpu(), x)
    assert torch.equal(n1.cpu(), x)
    # copy_ into an existing tensor, and a converting copy.
    dst = torch.empty(128, 64, device="neuron")
    dst.copy_(p, non_blocking=True)
    half = p.to("neuron", dtype=torch.float16, non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(dst.cpu(), x)
    assert torch.equal(half.cpu(), x.to(torch.float16))


def test_non_blocking_device_to_host_lands_in_pinned_memory():
    x = torch.arange(300, dtype=torch.float32).reshape(3, 100)
    n = x.to("neuron")
    back = n.to("cpu", non_blocking=True)
    torch.neuron.synchronize()
    assert back.is_pinned()  # as on CUDA: a non-blocking D2H copy needs page-locked memory
    assert torch.equal(back, x)
    # Into a preallocated pinned buffer.
    buf = torch.empty(3, 100, pin_memory=True)
    buf.copy_(n, non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(buf, x)


def test_neuron_tensors_cannot_be_pinned():
    n = torch.ones(4, device="neuron")
    assert not n.is_pinned()
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        n.pin_memory()
    with pytest.raises(RuntimeError, match="pin_memory=True only applies to CPU tensors"):
        torch.empty(4, device="neuron", pin_memory=True)


def test_host_memory_stats_follow_pinned_allocations():
    before = torch.neuron.host_memory_stats()
    for key in ("allocations.current", "allocated_bytes.current", "allocated_bytes.peak",
                "active_requests.current", "num_host_alloc", "num_host_free"):
        assert key in before, key
    p = torch.empty(5000, dtype=torch.uint8, pin_memory=True)  # rounded to whole 4 KiB pages
    during = torch.neuron.host_memory_stats()
    assert during["allocations.current"] - before["allocations.current"] == 1
    assert during["allocated_bytes.current"] - before["allocated_bytes.current"] == 8192
    assert during["num_host_alloc"] - before["num_host_alloc"] == 1
    del p
    after = torch.neuron.host_memory_stats()
    assert after["allocations.current"] == before["allocations.current"]
    assert after["allocated_bytes.current"] == before["allocated_bytes.current"]
    assert after["num_host_free"] - before["num_host_free"] == 1


class DictDataset(Dataset):
    def __init__(self, n):
        self.x = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"features": self.x[i], "label": torch.tensor(i % 2), "index": i}


def test_dataloader_pin_memory_batches_are_pinned_and_transfer():
    data = torch.arange(80, dtype=torch.float32).reshape(20, 4)
    labels = torch.arange(20)
    loader = DataLoader(TensorDataset(data, labels), batch_size=6, pin_memory=True)
    seen = []
    total = torch.zeros(4, device="neuron")
    for xb, yb in loader:
        assert xb.is_pinned() and yb.is_pinned()
        xn = xb.to("neuron", non_blocking=True)
        yn = yb.to("neuron", non_blocking=True)
        total += xn.sum(dim=0)
        seen.append(yn.cpu())
        assert torch.equal(xn.cpu(), xb)
    torch.neuron.synchronize()
    assert torch.equal(torch.cat(seen), labels)
    torch.testing.assert_close(total.cpu(), data.sum(dim=0))


def test_dataloader_pin_memory_with_dict_batches():
    loader = DataLoader(DictDataset(10), batch_size=4, pin_memory=True)
    batch = next(iter(loader))
    assert batch["features"].is_pinned() and batch["label"].is_pinned()
    assert batch["index"].is_pinned()  # default collate turned the ints into a tensor
    features = batch["features"].to("neuron:1", non_blocking=True)
    torch.neuron.synchronize(1)
    assert torch.equal(features.cpu(), torch.arange(12, dtype=torch.float32).reshape(4, 3))


def test_dataloader_pin_memory_with_worker_process():
    # The worker (forked) only produces CPU batches; pinning happens in this process.
    data = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    loader = DataLoader(TensorDataset(data), batch_size=5, pin_memory=True, num_workers=1)
    batches = []
    for (xb,) in loader:
        assert xb.is_pinned()
        batches.append(xb.to("neuron", non_blocking=True))
    torch.neuron.synchronize()
    assert torch.equal(torch.cat([b.cpu() for b in batches]), data)
