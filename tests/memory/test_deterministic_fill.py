"""Deterministic mode fills new memory as the CPU fills it: with
torch.use_deterministic_algorithms(True) and torch.utils.deterministic.fill_uninitialized_memory
(its default), empty, empty_strided, empty_permuted, empty_like, new_empty and the part a
resize_ adds hold NaN (integers and bool: their maximum), not whatever the allocator held."""

import pytest
import torch

DEV = "neuron"
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.complex64,
          torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool]


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    fill_before = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(before)
    torch.utils.deterministic.fill_uninitialized_memory = fill_before


def dirty_the_allocator():
    """Give the caching allocator blocks full of non-NaN bytes, for empty to reuse."""
    for n in (8, 64, 1024, 16384):
        torch.full((n,), 7, dtype=torch.uint8, device=DEV)


FACTORIES = {
    "empty": lambda dt, d: torch.empty(3, 5, dtype=dt, device=d),
    "empty_strided": lambda dt, d: torch.empty_strided((3, 5), (1, 3), dtype=dt, device=d),
    "empty_permuted": lambda dt, d: torch.empty_permuted((3, 5, 2), (2, 0, 1), dtype=dt, device=d),
    "empty_like": lambda dt, d: torch.empty_like(torch.zeros(4, 4, dtype=dt, device=d)),
    "new_empty": lambda dt, d: torch.zeros(2, dtype=dt, device=d).new_empty((6,)),
    "empty_channels_last": lambda dt, d: torch.empty(2, 3, 2, 2, dtype=dt, device=d,
                                                     memory_format=torch.channels_last),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("factory", FACTORIES)
def test_new_memory_is_filled_as_on_the_cpu(deterministic, factory, dtype):
    dirty_the_allocator()
    expected = FACTORIES[factory](dtype, "cpu")
    got = FACTORIES[factory](dtype, DEV)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool], ids=str)
def test_resize_fills_only_what_it_adds(deterministic, dtype):
    dirty_the_allocator()
    results = []
    for device in ("cpu", DEV):
        t = torch.arange(6, device=device).to(dtype)
        t.resize_(4, 5)  # 6 old elements kept, 14 new ones filled
        results.append(t.cpu())
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0, equal_nan=True)
    flat = results[1].flatten()
    assert torch.equal(flat[:6], torch.arange(6).to(dtype))


def test_without_the_switch_memory_is_not_written(deterministic):
    """fill_uninitialized_memory=False turns the fill off (what the CPU does too): an empty
    tensor then costs no write. Measured by the launches: none beside the allocation."""
    import torch_neuronx

    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.zeros(1, device=DEV)
    torch_neuronx.clear_op_tracking()
    torch.empty(100, device=DEV)
    assert torch_neuronx.get_executed_ops() == []
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.empty(100, device=DEV)
    assert "aten::fill_.Scalar" in torch_neuronx.get_executed_ops()
