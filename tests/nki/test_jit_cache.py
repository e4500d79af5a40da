"""Kernels' specialisations are cached by argument shapes, dtypes and constants (no arrays are
kept) and bounded across the process: the least recently used, of any kernel, go once their
programs together exceed the budget, so a process calling many kernels with many shapes (AWS's
NKI library suite) does not keep them all."""

import numpy as np

import nki
import nki._jit as jit
import nki.isa as nisa
import nki.language as nl


@nki.jit
def double(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), 2.0))
    return out


@nki.jit
def triple(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), 3.0))
    return out


def _shapes(kernel):
    return [k[2][0][1] for k in kernel._cache]


def test_specialisations_are_bounded_least_recently_used_first(monkeypatch):
    jit.clear_cache()
    arrays = [np.full((8, n), n, np.float32) for n in (4, 8, 16, 32)]
    nki.simulate(double)(arrays[0])
    per_spec = next(iter(double._cache.values())).instruction_count
    monkeypatch.setattr(jit, "_CACHE_INSTRUCTIONS", 2 * per_spec)
    for a in arrays[1:3]:
        nki.simulate(double)(a)
    assert _shapes(double) == [(8, 8), (8, 16)]  # (8, 4) went first
    nki.simulate(double)(arrays[1])  # a hit moves (8, 8) to the back
    nki.simulate(double)(arrays[3])
    assert _shapes(double) == [(8, 8), (8, 32)]
    # Nothing in the cache holds an argument's data.
    for spec in double._cache.values():
        assert not any(isinstance(v, np.ndarray) and v.size > 1 for v in vars(spec).values())
    # An evicted shape specialises again and runs right.
    np.testing.assert_array_equal(nki.simulate(double)(arrays[0]), 2 * arrays[0])
    jit.clear_cache()


def test_dataclass_arguments_specialise_by_their_fields():
    # AWS's library passes mutable (unhashable) @dataclass specs to its kernels.
    import dataclasses

    @dataclasses.dataclass
    class Spec:
        scale: float
        name: str = "x"

    @nki.jit
    def k(a, spec):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=spec.scale)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(a, Spec(2.0)), 2 * a)
    np.testing.assert_array_equal(nki.simulate(k)(a, Spec(2.0)), 2 * a)
    assert len(k._cache) == 1
    np.testing.assert_array_equal(nki.simulate(k)(a, Spec(3.0)), 3 * a)
    assert len(k._cache) == 2


def test_the_budget_is_shared_by_every_kernel(monkeypatch):
    jit.clear_cache()
    arrays = [np.full((8, n), n, np.float32) for n in (4, 8, 16)]
    nki.simulate(double)(arrays[0])
    per_spec = next(iter(double._cache.values())).instruction_count
    monkeypatch.setattr(jit, "_CACHE_INSTRUCTIONS", 2 * per_spec)
    nki.simulate(triple)(arrays[1])
    assert _shapes(double) == [(8, 4)] and _shapes(triple) == [(8, 8)]
    nki.simulate(double)(arrays[0])  # a hit: double's (8, 4) is now the most recent
    nki.simulate(triple)(arrays[2])  # over budget: triple's older (8, 8) goes, not double's
    assert _shapes(double) == [(8, 4)] and _shapes(triple) == [(8, 16)]
    assert jit._cached_instructions == sum(
        s.instruction_count for k in (double, triple) for s in k._cache.values())
    np.testing.assert_array_equal(nki.simulate(triple)(arrays[1]), 3 * arrays[1])
    # One specialisation larger than the whole budget is still kept (the one just traced).
    monkeypatch.setattr(jit, "_CACHE_INSTRUCTIONS", 1)
    nki.simulate(double)(arrays[2])
    assert _shapes(double) == [(8, 16)] and _shapes(triple) == []
    jit.clear_cache()
    assert jit._cached_instructions == 0 and not double._cache
