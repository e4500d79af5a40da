"""The direct allocation API of the legacy ``neuronxcc.nki`` (``neuronxcc.nki.compiler``, imported
as ``ncc``): ``ncc.sbuf.alloc(func)`` / ``ncc.sbuf.mod_alloc(...)`` and their PSUM variants
place each logical tile of an on-chip tensor at a physical location the kernel chooses (a start
partition and a byte offset in each SBUF partition; a PSUM bank, start partition and byte
offset), as AWS's NKI Direct Allocation Developer Guide and the ``nki.compiler`` reference pages
define them.

The interpreter treats placement as a check; values are unchanged by it. Every logical tile
keeps storage of its own, as automatically allocated tiles do, and each placement is checked
against the rules those pages state: the start-partition rule of the ISA (a tile of more than
64 partitions starts at 0; 33..64 at 0 or 64; up to 32 at 0, 32, 64 or 96), the partition's
bytes (SBUF: the target's ``sbuf_partition_bytes``; PSUM: a tile within one bank of
``psum_bank_bytes``, banks below ``psum_banks``; both from torch_neuronx/data/neuron_cores.ini),
and SBUF alignment (``sbuf_min_align``). Two tiles a kernel places on overlapping bytes share
memory on a device: where both are live at once, the later write would overwrite the earlier
tile there, which separate storage here cannot reproduce, so the kernel is refused, naming both
tiles and lines. Where their lifetimes do not overlap (the double buffering modulo allocation is
for), the later tile's first instruction waits for the earlier tile's last one, as the hardware
must, so the timeline pays for the reuse. Tiles the kernel does not place (automatic
allocation, and the interpreter's own temporaries) take no part in the check.
"""

from __future__ import annotations

from functools import reduce
from operator import mul

from nki import _core
from nki import language as _nl
from nki._core import PSUM_BANK_BYTES, PSUM_BANKS, error
from nki.legacy import report

_START_PARTITIONS = ((64, (0,)), (32, (0, 64)), (0, (0, 32, 64, 96)))


def _kernel_stack():
    """The kernel's frames at this call, innermost first, as (file, line): the statement, and
    the helper calls that reached it (a helper called from two places allocates twice)."""
    import os
    import sys

    out, f = [], sys._getframe(1)
    while f is not None:
        if os.path.dirname(os.path.abspath(f.f_code.co_filename)) not in _core._API_DIRS:
            out.append((f.f_code.co_filename, f.f_lineno))
        elif out:
            break  # back in the tracer that called the kernel
        f = f.f_back
    return tuple(out)


def _linear(shape, idx):
    return sum(i * reduce(mul, shape[d + 1:], 1) for d, i in enumerate(idx))


def _modulo(base, tiles, scale):
    """AWS's modulo placement along one axis: base + linearised (idx mod tiles) * scale."""
    def place(idx):
        shape = tuple(tiles) if tiles else (1,) * len(idx)
        if len(shape) != len(idx):
            raise error(f"num_*_tiles={tuple(tiles)} has {len(shape)} entries for a tensor of "
                        f"{len(idx)} block dims (give one per block dim, or none)")
        return _linear(shape, tuple(i % s for i, s in zip(idx, shape))) * scale + base
    return place


class DirectAllocation:
    """A ``buffer=`` that places each logical tile: func(idx, pdim_size, fdim_bytes) gives
    (start_partition, byte_addr) in SBUF or (bank, start_partition, byte_addr) in PSUM."""

    def __init__(self, memory, func, call):
        self.memory = memory
        self.func = func
        self.call = call  # how the kernel spelled it, for messages and the report
        self.location = _core.caller_location()
        self.statement = _kernel_stack()

    def place(self, tile, idx, name):
        """Checks the placement of logical tile `idx` (a fresh tensor) and records it."""
        tracer = _core.current_tracer()
        label = (f"{name or 'the tensor'} allocated at line {self.location[1]}"
                 + (f", block {tuple(idx)}" if idx else ""))
        if getattr(tracer, "auto_alloc_forced", False):
            return
        p, fbytes = tile.shape[0], tile._buffer.partition_bytes()
        # AWS's tracer traces an affine / sequential loop's body once: an allocation statement
        # in it is one allocation, placed where its first evaluation put it, however often the
        # unrolled body runs here (a base address the kernel advances in Python inside the body
        # advances once there). Only static_range iterations are told apart.
        loops = tuple((loc, i if static else None)
                      for loc, static, i in getattr(tracer, "legacy_loops", ()))
        key = (self.statement, loops, tuple(idx), tile.shape, tile.dtype.name)
        placements = tracer.__dict__.setdefault("legacy_placements", {})
        where = placements.get(key)
        if where is None:
            # By keyword, as AWS's compiler calls it (kernels bind other arguments with
            # functools.partial(func, bank_map=...)).
            where = self.func(idx=tuple(idx), pdim_size=p, fdim_size=fbytes)
            placements[key] = where
        psum = self.memory is _nl.psum
        want = 3 if psum else 2
        if not isinstance(where, tuple) or len(where) != want or not all(
                _core._is_int(v) for v in where):
            raise error(f"{self.call}: the placement of the tile of {label} is {where!r}; "
                        f"expected {'(bank, start_partition, byte_addr)' if psum else '(start_partition, byte_addr)'} integers")
        where = tuple(int(v) for v in where)
        bank, start, addr = where if psum else (None, *where)
        allowed = next(starts for above, starts in _START_PARTITIONS if p > above)
        if start not in allowed:
            raise error(f"{self.call}: the tile of {label} of {p} partitions starts at "
                        f"partition {start}; a tile of {p} partitions may start at "
                        f"{' / '.join(map(str, allowed))} (the ISA's start-partition rule)")
        if psum:
            if not 0 <= bank < PSUM_BANKS:
                raise error(f"{self.call}: the tile of {label} is placed in PSUM bank {bank}; "
                            f"a NeuronCore has banks 0..{PSUM_BANKS - 1}")
            limit, what = PSUM_BANK_BYTES, f"a PSUM bank's {PSUM_BANK_BYTES} bytes per partition"
        else:
            limit = tracer.spec["sbuf_partition_bytes"]
            what = (f"the {limit} bytes of a NeuronCore-v{tracer.spec['version']} SBUF "
                    "partition")
            align = _nl.tile_size.sbuf_min_align
            if addr % align:
                raise error(f"{self.call}: the tile of {label} starts at byte {addr}, not a "
                            f"multiple of sbuf_min_align = {align}")
        if addr < 0 or addr + fbytes > limit:
            raise error(f"{self.call}: the tile of {label} ({fbytes} bytes per partition) "
                        f"placed at byte {addr} reaches byte {addr + fbytes}, past {what}")
        buf = tile._buffer
        buf.placement = (self.memory, bank, start, start + p, addr, addr + fbytes)
        buf.placement_label = label
        buf.program = tracer.program
        report.use(self.call, _spelling(self.memory, bank, start, addr))


def _spelling(memory, bank, start, addr):
    if memory is _nl.psum:
        return (f"nl.ndarray(..., buffer=nl.psum, address=({start}, {bank} * "
                f"{PSUM_BANK_BYTES} + {addr})) per tile: NKI 0.6 places a tile with address=; "
                "block dims become a Python list of tiles")
    return (f"nl.ndarray(..., buffer=nl.sbuf, address=({start}, {addr})) per tile: NKI 0.6 "
            "places a tile with address=; block dims become a Python list of tiles")


class _Memory:
    def __init__(self, memory, name):
        self._memory = memory
        self._name = name

    def auto_alloc(self):
        """``ncc.<memory>.auto_alloc()``: automatic allocation, the same as nl.<memory>."""
        report.use(f"ncc.{self._name}.auto_alloc()", f"buffer=nl.{self._name}")
        return self._memory

    def alloc(self, func):
        """``ncc.<memory>.alloc(func)``: func(idx, pdim_size, fdim_bytes) places each tile."""
        if not callable(func):
            raise error(f"ncc.{self._name}.alloc takes a callable (idx, pdim_size, fdim_size)")
        return DirectAllocation(self._memory, func, f"ncc.{self._name}.alloc(func)")


class _Sbuf(_Memory):
    def mod_alloc(self, *, base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=()):
        """``ncc.sbuf.mod_alloc``: tile idx at partition base_partition + (idx mod
        num_par_tiles) * pdim_size and byte base_addr + (idx mod num_free_tiles) * fdim_size."""
        def func(idx, pdim_size, fdim_size):
            return (_modulo(base_partition, num_par_tiles, pdim_size)(idx),
                    _modulo(base_addr, num_free_tiles, fdim_size)(idx))
        return DirectAllocation(_nl.sbuf, func, "ncc.sbuf.mod_alloc(...)")


class _Psum(_Memory):
    def mod_alloc(self, *, base_bank, base_addr=0, base_partition=0, num_bank_tiles=(),
                  num_par_tiles=(), num_free_tiles=()):
        """``ncc.psum.mod_alloc``: tile idx in bank base_bank + (idx mod num_bank_tiles), at
        partition and byte offsets placed the same way."""
        def func(idx, pdim_size, fdim_size):
            return (_modulo(base_bank, num_bank_tiles, 1)(idx),
                    _modulo(base_partition, num_par_tiles, pdim_size)(idx),
                    _modulo(base_addr, num_free_tiles, fdim_size)(idx))
        return DirectAllocation(_nl.psum, func, "ncc.psum.mod_alloc(...)")


sbuf = _Sbuf(_nl.sbuf, "sbuf")
psum = _Psum(_nl.psum, "psum")


def _kernel_decorator(name, spelling, **flags):
    def decorate(kernel):
        from nki.legacy import jit

        k = jit(kernel)
        file, line = k._decorator
        k._harness.append((file, line, f"@nki.compiler.{name}", spelling))
        for key, value in flags.items():
            setattr(k, key, value)
        return k
    decorate.__name__ = name
    return decorate


skip_middle_end_transformations = _kernel_decorator(
    "skip_middle_end_transformations",
    "drop it: it tunes AWS's compiler passes, which do not change the kernel's values")
enable_stack_allocator = _kernel_decorator(
    "enable_stack_allocator",
    "drop it (automatic allocation chooses addresses in NKI 0.6)")
force_auto_alloc = _kernel_decorator(
    "force_auto_alloc",
    "drop the direct placements (ncc.*.alloc / mod_alloc): automatic allocation",
    auto_alloc_forced=True)


def check_placements(tracer):
    """Placed tiles that share bytes must not be live at once (see the module's note); where
    they are not, the later one's first instruction waits for the earlier one's last."""
    placed = [b for b in tracer.buffers if getattr(b, "placement", None) is not None]
    if len(placed) < 2:
        return
    first, last = {}, {}
    for i, ins in enumerate(tracer.instructions):
        for v in ins.operands():
            bid = v._buffer.id
            first.setdefault(bid, i)
            last[bid] = i
    live = sorted((b for b in placed if b.id in first), key=lambda b: first[b.id])
    for k, a in enumerate(live):
        ma, bank_a, p0, p1, b0, b1 = a.placement
        for b in live[k + 1:]:
            mb, bank_b, q0, q1, c0, c1 = b.placement
            if (mb is not ma or bank_a != bank_b or b.program != a.program or q1 <= p0
                    or p1 <= q0 or c1 <= b0 or b1 <= c0):
                continue
            if first[b.id] <= last[a.id]:
                at = tracer.instructions[first[b.id]].location
                end = tracer.instructions[last[a.id]].location
                where = f"bank {bank_a}, " if bank_a is not None else ""
                raise error(
                    f"the tiles of {a.placement_label} and of {b.placement_label} are placed on "
                    f"the same "
                    f"{ma.name.upper()} bytes ({where}partitions {max(p0, q0)}..{min(p1, q1) - 1},"
                    f" bytes {max(b0, c0)}..{min(b1, c1) - 1}) and are live at once: "
                    f"the second is first used at line {at[1]} while the first is still used at "
                    f"line {end[1]}; on a device the one "
                    "would overwrite the other. Give them different addresses (more "
                    "num_free_tiles / num_bank_tiles), or finish with the first before the "
                    "second is written", location=at)
            ins = tracer.instructions[first[b.id]]
            if last[a.id] not in ins.after:
                ins.after = list(ins.after) + [last[a.id]]

