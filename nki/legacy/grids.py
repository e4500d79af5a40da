"""Index grids and masks of the legacy ``neuronxcc.nki`` API.

``nl.mgrid[0:128, 0:512]`` and ``nl.arange(n)[:, None]`` build affine index expressions over grid
axes; indexing a tensor with them (``a[i_p + 128 * m, i_f]``) gives a strided view whose dims are
the grid axes in grid order; ``mask=`` (conjunctions of ``expr < bound`` on single axes) narrows
those dims. NKI 0.6 spells all of this with integer slices and ``min()``.
"""

from __future__ import annotations

import itertools
import operator

import numpy as np

from nki import _core
from nki._core import Tensor, error
from nki.legacy import report

_ids = itertools.count()


class Axis:
    """One axis of an index grid: the values start..stop-1, at result dim `position`."""

    def __init__(self, start, stop, position):
        self.id = next(_ids)
        self.start, self.stop, self.position = int(start), int(stop), position
        if self.stop <= self.start:
            raise error(f"index grid axis {start}:{stop} is empty")

    @property
    def count(self):
        return self.stop - self.start


class IndexExpr:
    """const + sum(coeff * axis value): the legacy API's affine index expression."""

    _index_grid = True

    def __init__(self, terms, const=0):
        self.terms = dict(terms)  # Axis -> int coefficient
        self.const = const

    # -- arithmetic
    def _combine(self, other, sign):
        if isinstance(other, IndexExpr):
            terms = dict(self.terms)
            for a, c in other.terms.items():
                terms[a] = terms.get(a, 0) + sign * c
            return IndexExpr({a: c for a, c in terms.items() if c}, self.const + sign * other.const)
        if _core._is_int(other):
            return IndexExpr(self.terms, self.const + sign * int(other))
        return NotImplemented

    def __add__(self, o): return self._combine(o, 1)
    def __radd__(self, o): return self._combine(o, 1)
    def __sub__(self, o): return self._combine(o, -1)
    def __rsub__(self, o): return (-self)._combine(o, 1)
    def __neg__(self): return IndexExpr({a: -c for a, c in self.terms.items()}, -self.const)

    def __mul__(self, o):
        if not _core._is_int(o):
            raise error("index expressions multiply by integers only")
        return IndexExpr({a: c * int(o) for a, c in self.terms.items()}, self.const * int(o))

    __rmul__ = __mul__

    # -- comparisons make predicates (masks, affine_select)
    def _cmp(self, o, op):
        return Predicate([(self - o if isinstance(o, IndexExpr) else self - int(o), op)])

    def __lt__(self, o): return self._cmp(o, operator.lt)
    def __le__(self, o): return self._cmp(o, operator.le)
    def __gt__(self, o): return self._cmp(o, operator.gt)
    def __ge__(self, o): return self._cmp(o, operator.ge)

    def __getitem__(self, key):
        # nl.arange(n)[:, None] / [None, :]: the axis's place in a 2-D grid.
        if not isinstance(key, tuple) or len(self.terms) != 1:
            raise error("index with [:, None] or [None, :] to place an nl.arange")
        (axis,) = self.terms
        slots = [k for k in key if k is not None]
        if len(slots) != 1:
            raise error("an nl.arange takes exactly one ':' among Nones")
        axis.position = next(i for i, k in enumerate(key) if k is not None)
        return self

    def value_at_zero(self):
        return self.const + sum(c * a.start for a, c in self.terms.items())

    def __repr__(self):
        parts = [f"{c}*axis{a.id}" for a, c in self.terms.items()]
        return " + ".join(parts + [str(self.const)])


class Predicate:
    """A conjunction of (expr op 0) conditions: a mask or an affine_select predicate."""

    def __init__(self, conditions):
        self.conditions = list(conditions)

    def __and__(self, other):
        if isinstance(other, (bool, np.bool_)):
            # A condition on unrolled loop variables (a Python bool) with a grid predicate.
            return self if other else False
        return Predicate(self.conditions + other.conditions)

    __rand__ = __and__

    def axis_bounds(self):
        """{Axis: (lo, hi)} index ranges (0-based) the mask keeps; only single-axis conditions
        can be a mask (a rectangle)."""
        bounds = {}
        for expr, op in self.conditions:
            if len(expr.terms) != 1:
                raise error("a mask= over several grid axes (a non-rectangular region) is not "
                            "supported; use nisa.affine_select for such predicates")
            (axis, c), = expr.terms.items()
            # expr = c * (start + i) + const  op  0
            base = expr.const + c * axis.start
            lo, hi = bounds.get(axis, (0, axis.count))
            for i in range(axis.count):
                keep = op(base + c * i, 0)
                if not keep:
                    if i < lo or i >= hi:
                        continue
                    # the kept range is contiguous for a monotone affine condition
                    if i == lo:
                        lo += 1
                    else:
                        hi = min(hi, i)
            bounds[axis] = (lo, max(lo, hi))
        return bounds


class MGrid:
    """``nl.mgrid[0:128, 0:512]``: one IndexExpr per dim, also as ``.p`` ``.x`` ``.y`` ``.z``."""

    def __init__(self, exprs):
        self.exprs = exprs

    def __iter__(self):
        return iter(self.exprs)

    def __len__(self):
        return len(self.exprs)

    def __getitem__(self, i):
        return self.exprs[i]

    @property
    def p(self):
        return self.exprs[0]

    @property
    def x(self):
        return self.exprs[1]

    @property
    def y(self):
        return self.exprs[2]

    @property
    def z(self):
        return self.exprs[3]


class _MGridMaker:
    def __getitem__(self, key):
        report.use("nl.mgrid", "integer slices (t[0:128, 0:512]) or nl.ds(start, size); "
                   ".ap(pattern) for patterns slices cannot express")
        key = key if isinstance(key, tuple) else (key,)
        exprs = []
        for pos, k in enumerate(key):
            if not isinstance(k, slice) or (k.step not in (None, 1)):
                raise error("nl.mgrid takes start:stop slices")
            axis = Axis(k.start or 0, k.stop, pos)
            exprs.append(IndexExpr({axis: 1}))
        return MGrid(exprs)


mgrid = _MGridMaker()


def arange(*args):
    """``nl.arange(n)`` / ``nl.arange(start, stop)``: one grid axis (place it with [:, None])."""
    report.use("nl.arange", "integer slices (t[0:n]) or nl.ds(start, size)")
    start, stop = (0, args[0]) if len(args) == 1 else (args[0], args[1])
    return IndexExpr({Axis(start, stop, 0): 1})


def grid_index(tensor, key):
    """A view of `tensor` indexed by index expressions (and integers): one dim per grid axis, in
    grid order."""
    if any(isinstance(k, Tensor) for k in key):
        from nki.legacy import indirect

        return indirect.index(tensor, key, lambda k: isinstance(k, IndexExpr))
    if len(key) > tensor.ndim:
        raise error(f"too many indices ({len(key)}) for a tensor of shape {tensor.shape}")
    key = key + (slice(None),) * (tensor.ndim - len(key))
    axes = {}
    offset = tensor.offset
    strides = {}
    for d, (k, st) in enumerate(zip(key, tensor.strides)):
        if isinstance(k, IndexExpr):
            offset += k.value_at_zero() * st
            for a, c in k.terms.items():
                axes[a] = a
                strides[a] = strides.get(a, 0) + c * st
        elif _core._is_int(k):
            offset += int(k) * st
        elif isinstance(k, slice) and k == slice(None) and tensor.shape[d] == 1:
            continue
        else:
            raise error("indexing with index grids and slices together is not supported: use "
                        "grids for every dim, or slices for every dim")
    order = sorted(axes, key=lambda a: a.position)
    if len({a.position for a in order}) != len(order):
        raise error("two index grid axes share a position: place nl.arange axes with [:, None] "
                    "and [None, :]")
    shape = [a.count for a in order]
    stride_list = [strides[a] for a in order]
    if tensor._buffer.on_chip:
        if _core._is_int(key[0]):
            # One partition, indexed by an integer: it stays a dim of size 1.
            shape, stride_list = [1] + shape, [tensor.strides[0]] + stride_list
            order = [None] + order
        elif not (isinstance(key[0], IndexExpr) and set(key[0].terms) == {order[0]}
                  and all(not isinstance(k, IndexExpr) or order[0] not in k.terms
                          for k in key[1:])):
            raise error("on an on-chip tile, the first grid axis indexes the partition dim (dim "
                        "0) and only it")
    if len(order) == 1 and order[0] is not None and order[0].position == 0:
        # One grid axis, at position 0 (nl.arange(n)[:, None] with integers on the other
        # dims): the legacy API's result is an (n, 1) tile, n partitions of one element
        # (AWS's nl.load page loads idx_tensor[i_p] into a [64 x 1] index tile).
        shape, stride_list, order = shape + [1], stride_list + [1], order + [None]
    view = Tensor(tensor._buffer, shape, stride_list, offset, tensor._dtype)
    view._grid_axes = order
    return view


class MaskedOff(Exception):
    """Raised by `masked` for ``mask=False``: the instruction does not run."""


class _MaskedOffResult:
    """What an instruction with ``mask=False`` returns. The legacy API's masks may compare loop
    variables (``mask=i * 128 >= j * 512``); loops unroll here, so such a mask is a Python bool,
    and False turns the instruction off: it writes nothing. Assigning or accumulating this
    result leaves the destination as it was; reading it anywhere else is refused (on the device
    it would be a tile nothing wrote)."""

    _masked_off = True

    def _assign_into(self, dst):
        pass

    def __repr__(self):
        return "<result of an instruction with mask=False>"


MASKED_OFF = _MaskedOffResult()


def skip_masked_off(fn):
    """Wrap an instruction so that ``mask=False`` makes it return MASKED_OFF unrun."""
    import functools

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        try:
            out = fn(*args, **kwargs)
        except MaskedOff:
            return MASKED_OFF
        mask = kwargs.get("mask")
        if isinstance(mask, Predicate) and isinstance(out, Tensor):
            # The mask covers the whole statement: `t[grid] = op(..., mask=m)` writes only what
            # m keeps of t[grid] (mask_target narrows the assignment's target).
            out._legacy_mask = mask
        return out

    return wrapped


def masked(t, mask):
    """`t` narrowed to what `mask` keeps: dims from grid axes by axis, others by position.
    A bool mask (a comparison of unrolled loop variables) keeps all (True) or turns the
    instruction off (False: raises MaskedOff for skip_masked_off)."""
    if t is MASKED_OFF and mask is not False:
        raise error("this operand is the result of an instruction turned off by mask=False "
                    "(it wrote nothing); read it only under the same mask")
    if isinstance(mask, (bool, np.bool_)):
        if not bool(mask):
            raise MaskedOff()
        return t
    if mask is None:
        return t
    from nki.legacy.indirect import IndirectAccess

    if isinstance(t, IndirectAccess):
        # The partition dim comes from the index tile: a mask on the grid axis at position 0
        # (the one the indices were computed over) narrows it; free dims by their grid axes.
        bounds = mask.axis_bounds()
        by_position = {a.position: b for a, b in bounds.items()}
        dims = [by_position.get(0)] + [bounds.get(a) if a is not None else by_position.get(d + 1)
                                       for d, a in enumerate(t.free_axes)]
        return t.narrowed(dims)
    if not isinstance(t, Tensor):
        return t
    bounds = mask.axis_bounds()
    grid = getattr(t, "_grid_axes", None)
    by_position = {a.position: b for a, b in bounds.items()}
    shape, offset = list(t.shape), t.offset
    for d in range(t.ndim):
        if grid is not None and d < len(grid):
            b = bounds.get(grid[d])
        else:
            b = by_position.get(d)
        if b is None:
            continue
        lo, hi = b
        hi = min(hi, shape[d] + lo) if grid is None else hi
        offset += lo * t.strides[d]
        shape[d] = max(0, min(hi, t.shape[d]) - lo)
    if 0 in shape:
        raise error("mask= keeps no element of this tile")
    out = Tensor(t._buffer, shape, t.strides, offset, t._dtype)
    if grid is not None:
        out._grid_axes = grid
    return out


def mask_target(dst, value):
    """The target of `dst[...] = value` narrowed by the mask `value` was computed under, where
    the mask made the value smaller than the grid-indexed target."""
    mask = getattr(value, "_legacy_mask", None)
    if (mask is None or not isinstance(dst, Tensor) or dst.shape == value.shape
            or getattr(dst, "_grid_axes", None) is None):
        return dst
    return masked(dst, mask)
