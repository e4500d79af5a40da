"""The neuron caching allocator's statistics: what torch.neuron.memory_* and
torch.accelerator.memory_* report, caching and reuse of freed blocks, empty_cache, peaks,
memory_summary and mem_get_info.

Other tests in this process may hold memory on neuron, so every check measures a difference
around the allocations it makes. Sizes are chosen so that the allocator's rounding is known:
512-byte steps below 1 MiB, four size classes per power of two above."""

import pytest
import torch

import torch_neuronx

pytestmark = pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")

KiB = 1024
MiB = 1024**2
GiB = 1024**3

DEVICE = 3  # the device the fewest other tests touch


def nbytes(n, device=DEVICE):
    return torch.empty(n, dtype=torch.uint8, device=f"neuron:{device}")


def stats():
    return torch.neuron.memory_stats(DEVICE)


@pytest.fixture(autouse=True)
def _fresh_allocator_state():
    # No cached blocks (a larger cached block could serve a request) and the peak at the current.
    torch.neuron.synchronize(DEVICE)
    torch.neuron.empty_cache()
    torch.neuron.reset_peak_memory_stats(DEVICE)
    yield


@pytest.mark.parametrize(
    "request_bytes, rounded",
    [
        (1, 512),
        (4000, 4096),
        (512 * KiB + 1, 512 * KiB + 512),
        (3 * MiB, 3 * MiB),
        (5 * MiB + 1, 6 * MiB),  # 4 MiB..8 MiB in 1 MiB classes
        (9 * MiB, 10 * MiB),  # 8 MiB..16 MiB in 2 MiB classes
    ],
)
def test_memory_allocated_grows_by_rounded_size(request_bytes, rounded):
    before = torch.neuron.memory_allocated(DEVICE)
    before_requested = stats()["requested_bytes.all.current"]
    t = nbytes(request_bytes)
    assert torch.neuron.memory_allocated(DEVICE) - before == rounded
    assert stats()["requested_bytes.all.current"] - before_requested == request_bytes
    del t
    assert torch.neuron.memory_allocated(DEVICE) == before


def test_float_tensor_counts_element_bytes():
    before = torch.neuron.memory_allocated(DEVICE)
    t = torch.empty(1000, dtype=torch.float32, device=f"neuron:{DEVICE}")  # 4000 bytes
    u = torch.empty(250, 4, dtype=torch.bfloat16, device=f"neuron:{DEVICE}")  # 2000 bytes
    assert torch.neuron.memory_allocated(DEVICE) - before == 4096 + 2048
    del t, u
    assert torch.neuron.memory_allocated(DEVICE) == before


def test_max_memory_allocated_tracks_peak():
    base = torch.neuron.memory_allocated(DEVICE)
    assert torch.neuron.max_memory_allocated(DEVICE) == base  # reset by the fixture
    a = nbytes(8 * MiB)
    b = nbytes(4 * MiB)
    del a, b
    assert torch.neuron.memory_allocated(DEVICE) == base
    assert torch.neuron.max_memory_allocated(DEVICE) == base + 12 * MiB
    c = nbytes(2 * MiB)
    del c  # below the peak: peak unchanged
    assert torch.neuron.max_memory_allocated(DEVICE) == base + 12 * MiB
    torch.neuron.reset_peak_memory_stats(DEVICE)
    assert torch.neuron.max_memory_allocated(DEVICE) == base
    torch.neuron.reset_max_memory_allocated(DEVICE)
    assert torch.neuron.max_memory_allocated(DEVICE) == base


def test_reserved_at_least_allocated_and_freed_blocks_are_cached():
    torch.neuron.empty_cache()
    reserved0 = torch.neuron.memory_reserved(DEVICE)
    device_allocs0 = stats()["num_device_alloc"]
    t = nbytes(6 * MiB)
    ptr = t.data_ptr()
    assert torch.neuron.memory_reserved(DEVICE) >= torch.neuron.memory_allocated(DEVICE)
    assert torch.neuron.memory_reserved(DEVICE) - reserved0 == 6 * MiB
    del t
    # Freed but cached: still reserved.
    assert torch.neuron.memory_reserved(DEVICE) - reserved0 == 6 * MiB
    # A request of the same size class reuses the cached block, without a new device allocation.
    u = nbytes(6 * MiB - 100)
    assert u.data_ptr() == ptr
    assert torch.neuron.memory_reserved(DEVICE) - reserved0 == 6 * MiB
    assert stats()["num_device_alloc"] - device_allocs0 == 1
    assert torch.neuron.max_memory_reserved(DEVICE) >= torch.neuron.memory_reserved(DEVICE)
    del u


def test_larger_cached_block_is_accounted_at_its_real_size():
    reserved0 = torch.neuron.memory_reserved(DEVICE)
    allocated0 = torch.neuron.memory_allocated(DEVICE)
    t = nbytes(10 * MiB)
    ptr = t.data_ptr()
    del t
    # An 8 MiB request may reuse the cached 10 MiB block; it then occupies all 10 MiB.
    u = nbytes(8 * MiB)
    assert u.data_ptr() == ptr
    assert torch.neuron.memory_allocated(DEVICE) - allocated0 == 10 * MiB
    assert torch.neuron.memory_reserved(DEVICE) - reserved0 == 10 * MiB
    del u
    torch.neuron.empty_cache()
    # Everything reserved went back: the stats agree with the HBM.
    assert torch.neuron.memory_reserved(DEVICE) == reserved0
    free, total = torch.neuron.mem_get_info(DEVICE)
    assert total - free == reserved0


def test_reused_block_holds_new_values():
    t = torch.full((1024,), 7.0, device=f"neuron:{DEVICE}")
    del t
    u = torch.arange(1024.0, device=f"neuron:{DEVICE}")
    assert torch.equal(u.cpu(), torch.arange(1024.0))


def test_empty_cache_lowers_reserved_and_raises_free():
    torch.neuron.empty_cache()
    free0, total = torch.neuron.mem_get_info(DEVICE)
    reserved0 = torch.neuron.memory_reserved(DEVICE)
    t = nbytes(16 * MiB)
    assert torch.neuron.mem_get_info(DEVICE)[0] == free0 - 16 * MiB
    del t
    # Cached blocks are not free HBM.
    assert torch.neuron.memory_reserved(DEVICE) == reserved0 + 16 * MiB
    assert torch.neuron.mem_get_info(DEVICE)[0] == free0 - 16 * MiB
    frees0 = stats()["num_device_free"]
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved(DEVICE) == reserved0
    assert torch.neuron.mem_get_info(DEVICE) == (free0, total)
    assert stats()["num_device_free"] > frees0


def test_empty_cache_keeps_live_tensors():
    x = torch.arange(100_000, dtype=torch.float32)
    n = x.to(f"neuron:{DEVICE}")
    allocated = torch.neuron.memory_allocated(DEVICE)
    torch.neuron.empty_cache()
    torch.accelerator.empty_cache()
    torch_neuronx.empty_cache()
    assert torch.neuron.memory_allocated(DEVICE) == allocated
    assert torch.neuron.memory_reserved(DEVICE) >= allocated
    assert torch.equal(n.cpu(), x)


def test_memory_stats_keys_and_consistency():
    s = stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "allocated_bytes.small_pool.current",
        "allocated_bytes.large_pool.current",
        "reserved_bytes.all.current",
        "active_bytes.all.current",
        "requested_bytes.all.current",
        "allocation.all.current",
        "segment.all.current",
        "num_alloc_retries",
        "num_ooms",
        "num_device_alloc",
        "num_device_free",
    ):
        assert key in s, key
    assert s["allocated_bytes.all.current"] == torch.neuron.memory_allocated(DEVICE)
    assert s["reserved_bytes.all.current"] == torch.neuron.memory_reserved(DEVICE)
    assert s["allocated_bytes.all.peak"] == torch.neuron.max_memory_allocated(DEVICE)
    assert s["reserved_bytes.all.peak"] == torch.neuron.max_memory_reserved(DEVICE)
    assert (
        s["allocated_bytes.small_pool.current"] + s["allocated_bytes.large_pool.current"]
        == s["allocated_bytes.all.current"]
    )


def test_small_and_large_pools():
    s0 = stats()
    small = nbytes(100 * KiB)
    s1 = stats()

    def grew(key, later, earlier):
        return later[f"allocated_bytes.{key}.current"] - earlier[f"allocated_bytes.{key}.current"]

    assert grew("small_pool", s1, s0) == 100 * KiB
    assert grew("large_pool", s1, s0) == 0
    assert s1["allocation.all.current"] - s0["allocation.all.current"] == 1
    large = nbytes(2 * MiB)
    s2 = stats()
    assert grew("large_pool", s2, s1) == 2 * MiB
    assert s2["allocation.large_pool.current"] - s1["allocation.large_pool.current"] == 1
    del small, large
    s3 = stats()
    assert s3["allocation.all.current"] == s0["allocation.all.current"]
    assert s3["allocated_bytes.all.freed"] - s0["allocated_bytes.all.freed"] == 100 * KiB + 2 * MiB


def test_reset_accumulated_memory_stats():
    t = nbytes(MiB)
    del t
    assert stats()["allocated_bytes.all.allocated"] > 0
    torch.neuron.reset_accumulated_memory_stats(DEVICE)
    s = stats()
    assert s["allocated_bytes.all.allocated"] == 0
    assert s["allocated_bytes.all.freed"] == 0
    assert s["allocated_bytes.all.current"] == torch.neuron.memory_allocated(DEVICE)


def test_neuron_and_accelerator_report_the_same_numbers():
    keep = nbytes(3 * MiB)
    acc = torch.accelerator
    for device in (DEVICE, f"neuron:{DEVICE}", torch.device("neuron", DEVICE)):
        assert torch.neuron.memory_allocated(device) == acc.memory_allocated(DEVICE)
        assert torch.neuron.max_memory_allocated(device) == acc.max_memory_allocated(DEVICE)
        assert torch.neuron.memory_reserved(device) == acc.memory_reserved(DEVICE)
        assert torch.neuron.max_memory_reserved(device) == acc.max_memory_reserved(DEVICE)
        # torch.neuron adds TorchNeuron's nested entries; every flat key is torch.accelerator's.
        flat = acc.memory_stats(DEVICE)
        assert {k: torch.neuron.memory_stats(device)[k] for k in flat} == dict(flat)
        assert torch.neuron.mem_get_info(device) == acc.get_memory_info(DEVICE)
    assert torch_neuronx.memory_allocated(DEVICE) == torch.accelerator.memory_allocated(DEVICE)
    # Index-less: the current device.
    with torch.neuron.device(DEVICE):
        assert torch.neuron.memory_allocated() == torch.accelerator.memory_allocated()
        assert torch.neuron.memory_allocated() == torch.neuron.memory_allocated(DEVICE)
    del keep


def test_devices_are_accounted_separately():
    before = [torch.neuron.memory_allocated(i) for i in range(torch.neuron.device_count())]
    t = nbytes(MiB, device=1)
    after = [torch.neuron.memory_allocated(i) for i in range(torch.neuron.device_count())]
    assert after[1] - before[1] == MiB
    others = [a - b for i, (a, b) in enumerate(zip(after, before)) if i != 1]
    assert others == [0] * (len(after) - 1)
    del t


def test_op_results_are_counted():
    a = torch.randn(256, 256).to(f"neuron:{DEVICE}")  # 256 KiB
    before = torch.neuron.memory_allocated(DEVICE)
    c = a @ a
    assert torch.neuron.memory_allocated(DEVICE) - before == 256 * KiB
    torch.testing.assert_close(c.cpu(), a.cpu() @ a.cpu())


def test_functional_results_are_allocated_on_their_device_not_the_host():
    # A functional op's CPU code allocates its result in HBM of the op's device (no copy); that
    # redirection is confined to the kernel: CPU tensors made around it stay in host memory.
    a = torch.randn(64, 64).to(f"neuron:{DEVICE}")  # 16 KiB
    others = [torch.neuron.memory_allocated(i) for i in range(torch.neuron.device_count())]
    before = others[DEVICE]
    results = [a.exp(), torch.cat([a, a]), a.sum(0), a.permute(1, 0).neg()]
    host = torch.randn(64, 64).exp()
    assert torch.neuron.memory_allocated(DEVICE) - before == 16 * KiB + 32 * KiB + 512 + 16 * KiB
    after = [torch.neuron.memory_allocated(i) for i in range(torch.neuron.device_count())]
    assert [x - y for i, (x, y) in enumerate(zip(after, others)) if i != DEVICE] == [0] * (len(after) - 1)
    assert host.device.type == "cpu" and not host.is_pinned()
    a_cpu = a.cpu()
    expected = [a_cpu.exp(), torch.cat([a_cpu, a_cpu]), a_cpu.sum(0), a_cpu.permute(1, 0).neg()]
    for got, want in zip(results, expected):
        assert got.device == torch.device("neuron", DEVICE)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want)
    del results, got
    assert torch.neuron.memory_allocated(DEVICE) == before


def test_mem_get_info():
    free, total = torch.neuron.mem_get_info(DEVICE)
    assert total == 24 * GiB == torch.neuron.get_device_properties(DEVICE).total_memory
    assert 0 < free <= total
    # Everything the allocator reserved is what HBM is missing.
    torch.neuron.empty_cache()
    free, total = torch.neuron.mem_get_info(DEVICE)
    assert total - free == torch.neuron.memory_reserved(DEVICE)


def test_memory_summary():
    keep = nbytes(5 * MiB)
    text = torch.neuron.memory_summary(DEVICE)
    assert f"Neuron Memory Summary, Device {DEVICE} (neuron:{DEVICE})" in text
    assert "HBM capacity 24.00 GiB" in text
    rows = ("Allocated memory", "Reserved memory", "Allocations", "from small pool",
            "from large pool")
    for row in rows:
        assert row in text, row
    # The Allocations row's current usage is the live allocation count.
    lines = text.splitlines()
    allocations_row = next(line for line in lines if line.strip().startswith("Allocations "))
    assert int(allocations_row.split()[1]) == stats()["allocation.all.current"]
    short = torch.neuron.memory_summary(DEVICE, abbreviated=True)
    assert "Allocated memory" in short and "from small pool" not in short
    assert "Neuron Memory Summary, Device 1" in torch.neuron.memory_summary("neuron:1")
    del keep


def test_invalid_device_index_for_stats():
    # These reach the allocator's C++ check: RuntimeError, in TorchNeuron's words.
    out_of_range = r"^Device index 9 is out of range\. Valid range is 0 to 3 for this process"
    with pytest.raises(RuntimeError, match=out_of_range + r".*4 NeuronCore"):
        torch.neuron.memory_allocated(9)
    with pytest.raises(RuntimeError, match=out_of_range):
        torch.neuron.mem_get_info(9)
