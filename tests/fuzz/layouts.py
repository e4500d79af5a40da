"""Layouts the fuzzer gives a tensor: one description covers them all.

A tensor of sizes S is laid out as a view of a buffer: the buffer's dimensions are S permuted by
`perm`, each stretched by a step (`steps`) and started at an offset inside it (`starts`), and the
buffer itself starts `storage_offset` elements into its storage. The identity of each is the
contiguous layout; channels_last is the permutation (0, 2, 3, 1) and channels_last_3d
(0, 2, 3, 4, 1); a permuted view, a strided (sliced) view and a storage offset are the others, and
any combination of them. `expanded` names dimensions whose one row is broadcast (stride 0): the
only layout that changes values, so only for ops whose inputs may be any numbers.

The elements of the storage outside the view hold a filler no op would produce from the view, so
a kernel that reads outside its operand's view gives a different answer than CPU."""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import strategies as st

MEMORY_FORMATS = {4: ("channels_last", (0, 2, 3, 1)), 5: ("channels_last_3d", (0, 2, 3, 4, 1))}


@dataclasses.dataclass(frozen=True)
class Layout:
    perm: tuple[int, ...]
    steps: tuple[int, ...]
    starts: tuple[int, ...]
    storage_offset: int = 0
    expanded: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        """What a person calls it: contiguous, channels_last, permuted, strided, offset, expanded."""
        parts = []
        identity = tuple(range(len(self.perm)))
        if self.perm != identity:
            known = MEMORY_FORMATS.get(len(self.perm))
            parts.append(known[0] if known and known[1] == self.perm else f"permuted{self.perm}")
        if any(s != 1 for s in self.steps) or any(self.starts):
            parts.append(f"strided(steps={self.steps}, starts={self.starts})")
        if self.storage_offset:
            parts.append(f"offset={self.storage_offset}")
        if self.expanded:
            parts.append(f"expanded(dims={self.expanded})")
        return "+".join(parts) or "contiguous"

    def __repr__(self) -> str:
        return self.name

    def apply(self, tensor: torch.Tensor) -> torch.Tensor:
        """A CPU tensor equal to `tensor` (but for `expanded` dimensions) laid out this way."""
        sizes = list(tensor.shape)
        if self.expanded:
            for d in self.expanded:
                tensor = tensor.narrow(d, 0, 1)
            sizes_kept = list(tensor.shape)
        else:
            sizes_kept = sizes
        buffer_sizes = [
            sizes_kept[p] * self.steps[i] + self.starts[i] for i, p in enumerate(self.perm)
        ]
        numel = 1
        for s in buffer_sizes:
            numel *= s
        storage = torch.full((self.storage_offset + numel,), _filler(tensor.dtype), dtype=tensor.dtype)
        buffer = storage[self.storage_offset :].view(buffer_sizes)
        view = buffer[
            tuple(slice(start, start + sizes_kept[p] * step, step)
                  for p, step, start in zip(self.perm, self.steps, self.starts))
        ]
        inverse = sorted(range(len(self.perm)), key=lambda i: self.perm[i])
        view = view.permute(inverse)
        view.copy_(tensor)
        return view.expand(sizes) if self.expanded else view


def _filler(dtype: torch.dtype):
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point or dtype.is_complex:
        return -77.25
    return 77 if dtype != torch.uint8 else 177


def contiguous(ndim: int) -> Layout:
    return Layout(tuple(range(ndim)), (1,) * ndim, (0,) * ndim)


@st.composite
def layouts(draw, shape: tuple[int, ...], allow_expand: bool = False) -> Layout:
    """A layout for a tensor of `shape`: about a third contiguous, then the memory format of its
    rank, then any permutation, step, start and storage offset."""
    ndim = len(shape)
    kind = draw(st.sampled_from(["contiguous", "memory_format", "general"]))
    if kind == "contiguous" or ndim == 0:
        layout = contiguous(ndim)
        offset = draw(st.sampled_from([0, 0, 3]))
        layout = dataclasses.replace(layout, storage_offset=offset)
    elif kind == "memory_format" and ndim in MEMORY_FORMATS:
        layout = Layout(MEMORY_FORMATS[ndim][1], (1,) * ndim, (0,) * ndim)
    else:
        perm = tuple(draw(st.permutations(range(ndim))))
        steps = tuple(draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=ndim, max_size=ndim)))
        starts = tuple(draw(st.integers(0, s - 1)) for s in steps)
        offset = draw(st.sampled_from([0, 1, 5]))
        layout = Layout(perm, steps, starts, offset)
    if allow_expand and ndim:
        broadcastable = [d for d, s in enumerate(shape) if s > 1]
        if broadcastable and draw(st.booleans()):
            dims = draw(st.lists(st.sampled_from(broadcastable), min_size=1, unique=True))
            layout = dataclasses.replace(layout, expanded=tuple(sorted(dims)))
    return layout


def describe(tensor: torch.Tensor) -> str:
    """One tensor as a reader of a failure needs it: dtype, sizes, strides, offset, device."""
    if tensor.layout != torch.strided:
        return f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)} {tensor.layout}"
    return (f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)} "
            f"stride={tensor.stride()} offset={tensor.storage_offset()} on {tensor.device.type}")
