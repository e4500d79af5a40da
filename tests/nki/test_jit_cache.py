"""A kernel's specialisations are cached by argument shapes, dtypes and constants (no arrays
are kept) and bounded: the least recently used go once their programs exceed the budget, so a
process calling one kernel with many shapes does not keep them all."""

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


def test_specialisations_are_bounded_least_recently_used_first(monkeypatch):
    double._cache.clear()
    arrays = [np.full((8, n), n, np.float32) for n in (4, 8, 16, 32)]
    nki.simulate(double)(arrays[0])
    per_spec = next(iter(double._cache.values())).instruction_count
    monkeypatch.setattr(jit, "_CACHE_INSTRUCTIONS", 2 * per_spec)
    for a in arrays[1:3]:
        nki.simulate(double)(a)
    assert [k[2][0][1] for k in double._cache] == [(8, 8), (8, 16)]  # (8, 4) went first
    nki.simulate(double)(arrays[1])  # a hit moves (8, 8) to the back
    nki.simulate(double)(arrays[3])
    assert [k[2][0][1] for k in double._cache] == [(8, 8), (8, 32)]
    # Nothing in the cache holds an argument's data.
    for spec in double._cache.values():
        assert not any(isinstance(v, np.ndarray) and v.size > 1 for v in vars(spec).values())
    # An evicted shape specialises again and runs right.
    np.testing.assert_array_equal(nki.simulate(double)(arrays[0]), 2 * arrays[0])


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
