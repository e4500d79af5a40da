"""Memory statistics of the neuron caching allocator. These are the numbers
torch.accelerator.memory_* reports for neuron too: both read the same allocator.

memory_stats() gives TorchNeuron's schema (nested "allocated_bytes" / "reserved_bytes" /
"active_bytes" entries with current, peak, allocated, freed, and the counters "num_alloc_retries",
"num_ooms", "num_tensor_frees", "allocation_requests") together with CUDA's flat keys
("allocated_bytes.all.current", ...), which device-generic PyTorch code reads through
torch.<device>.memory_stats() (torch.distributed._tools.MemoryTracker reads "num_alloc_retries"
and "active_bytes.all.current")."""

from collections import OrderedDict
from typing import Any

import torch

from torch_neuronx import _C
from torch_neuronx.neuron._device import _check_device_index, _device_index, _lazy_init

__all__ = [
    "empty_cache",
    "host_memory_stats",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
]


def _index(device) -> int:
    _lazy_init()
    return _check_device_index(_device_index(device), RuntimeError)


# The byte statistics TorchNeuron nests, each as {current, peak, allocated, freed}.
_NESTED_BYTE_STATS = ("allocated_bytes", "reserved_bytes", "active_bytes")
_METRICS = ("current", "peak", "allocated", "freed")


def memory_stats(device=None) -> "OrderedDict[str, Any]":
    """The allocator's statistics for `device` (default: the current device).

    TorchNeuron's entries come first: "allocated_bytes", "reserved_bytes" and "active_bytes",
    each a dict of current / peak / allocated (total increase) / freed (total decrease) bytes
    over all pools, then "num_alloc_retries", "num_ooms", "num_tensor_frees" (tensor blocks
    freed) and "allocation_requests" (tensor blocks allocated). The flat CUDA keys follow,
    exactly as torch.accelerator.memory_stats() gives them, with the small/large pool split.
    Peaks reset with reset_peak_memory_stats(); the allocated/freed totals and the counters with
    reset_accumulated_memory_stats()."""
    flat = torch.accelerator.memory_stats(_index(device))
    stats: "OrderedDict[str, Any]" = OrderedDict()
    for key in _NESTED_BYTE_STATS:
        stats[key] = {m: flat.get(f"{key}.all.{m}", 0) for m in _METRICS}
    stats["num_alloc_retries"] = flat.get("num_alloc_retries", 0)
    stats["num_ooms"] = flat.get("num_ooms", 0)
    # One tensor allocation is one "allocation" block in CUDA's terms: counted when handed out and
    # when freed (zero-byte tensors hold no block and are not counted).
    stats["num_tensor_frees"] = flat.get("allocation.all.freed", 0)
    stats["allocation_requests"] = flat.get("allocation.all.allocated", 0)
    stats.update(flat)
    return stats


def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Give cached, unused HBM blocks back to the device (tensors in use are not affected)."""
    if _C._is_initialized():
        torch.accelerator.empty_cache()


def mem_get_info(device=None) -> tuple:
    """(free, total) HBM bytes of the logical core; free excludes blocks the allocator caches."""
    free, total, _ = _C._hbm_info(_index(device))
    return free, total


def host_memory_stats() -> "OrderedDict[str, Any]":
    """Statistics of the pinned host allocator (Tensor.pin_memory(), DataLoader pin_memory=True),
    under torch.cuda.host_memory_stats()'s keys: "allocations.current", "allocated_bytes.peak"..."""
    # torch.accelerator has no host_memory_stats in 2.13, so the allocator is asked directly.
    return OrderedDict(sorted(_C._host_memory_stats().items()))


def _format_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A human-readable table of the allocator's statistics for `device`, titled "Neuron Memory
    Summary" as TorchNeuron's is. The full form adds the small/large pool split under each row."""
    index = _index(device)
    stats = memory_stats(index)
    free, total = mem_get_info(index)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Allocations", "allocation", False),
        ("Active allocs", "active", False),
        ("Reserved segments", "segment", False),
    ]
    pools = ("all",) if abbreviated else ("all", "small_pool", "large_pool")
    width = 78
    lines = [
        "=" * width,
        f" Neuron Memory Summary, Device {index} (neuron:{index})",
        f" HBM capacity {_format_size(total)}, free {_format_size(free)}",
        f" Allocations: {stats['allocation_requests']}  |  Frees: {stats['num_tensor_frees']}"
        f"  |  OOMs: {stats['num_ooms']}  |  Alloc retries: {stats['num_alloc_retries']}",
        "-" * width,
        f" {'Metric':<28}{'Cur Usage':>12}{'Peak Usage':>12}{'Tot Alloc':>12}{'Tot Freed':>12}",
        "-" * width,
    ]
    for title, key, is_bytes in rows:
        for pool in pools:
            prefix = f"{key}.{pool}"
            values = [stats.get(f"{prefix}.{k}", 0) for k in _METRICS]
            shown = [_format_size(v) if is_bytes else str(v) for v in values]
            label = title if pool == "all" else f"  from {pool.replace('_', ' ')}"
            lines.append(f" {label:<28}" + "".join(f"{s:>12}" for s in shown))
    lines += [
        "-" * width,
        f" Device allocs/frees (segments from HBM): {stats.get('num_device_alloc', 0)}/"
        f"{stats.get('num_device_free', 0)}",
        "=" * width,
    ]
    return "\n".join(lines) + "\n"
