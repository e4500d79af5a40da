"""nisa.core_barrier's engine= in the modelled time: AWS's page, "The barrier will block
execution on this engine, other engines will not be blocked". Checked by the rule, on the
kernel's own timeline: after the barrier, an instruction on another engine that does not touch
the barrier's data starts when it would without the barrier; the same instruction on the
barrier's engine, and any access to the data, start after the release."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki._core import OP_BARRIER

ROWS, COLS = 64, 32
LINES = {}


def _kernel(barrier_engine, probe_engine):
    """Core k: t = its half of x, scaled by 2 six times on core 0 (which reaches the barrier
    late) and once on core 1, written to `shared`; the barrier; the probe adds 1 to w, a tile of
    its own loaded before; then each core reads the other's half of `shared` and stores it + w."""
    @nki.jit
    def k(x):
        shared = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
        w = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * ROWS:(i + 1) * ROWS, :])
        nisa.dma_copy(dst=w, src=x[i * ROWS:(i + 1) * ROWS, :])
        for _ in range(6 if i == 0 else 1):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0,
                               engine=nisa.engine.vector)
        nisa.dma_copy(dst=shared[i * ROWS:(i + 1) * ROWS, :], src=t)
        if barrier_engine is not None:
            nisa.core_barrier(shared, (0, 1), engine=barrier_engine)
        nisa.tensor_scalar(dst=w, data=w, op0=nl.add, operand0=1.0, engine=probe_engine)  # probe
        j = 1 - i
        u = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=shared[j * ROWS:(j + 1) * ROWS, :])  # reader
        nisa.tensor_tensor(dst=u, data1=u, data2=w, op=nl.add)
        nisa.dma_copy(dst=out[i * ROWS:(i + 1) * ROWS, :], src=u)
        return out
    return k


def _line(marker):
    if marker not in LINES:
        import inspect
        src, first = inspect.getsourcelines(_kernel)
        LINES[marker] = next(first + n for n, text in enumerate(src) if f"# {marker}" in text)
    return LINES[marker]


def _times(barrier_engine, probe_engine):
    """(probe start per core, reader start per core, release or None) on the timeline."""
    k = _kernel(barrier_engine, probe_engine)
    x = np.ones((2 * ROWS, COLS), np.float32)
    spec = k.specialize((x,), {}, grid=(2,))
    times = spec.timeline()["instruction_times_ns"]
    at = lambda marker: [times[n][0] for n, loc in enumerate(spec.locations)
                         if loc[1] == _line(marker)]
    barriers = [n for n, op in enumerate(spec.opcodes) if op == OP_BARRIER]
    release = times[barriers[0]][1] if barriers else None
    if barriers:
        assert len(barriers) == 2 and times[barriers[1]][1] == release  # one release
    return at("probe"), at("reader"), release


ENGINES = [nisa.engine.vector, nisa.engine.gpsimd, nisa.engine.scalar]


@pytest.mark.parametrize("barrier_engine", ENGINES, ids=lambda e: e.name)
@pytest.mark.parametrize("probe_engine", ENGINES, ids=lambda e: e.name)
def test_the_barrier_holds_its_engine_and_its_datas_users_only(barrier_engine, probe_engine):
    probe, reader, release = _times(barrier_engine, probe_engine)
    free_probe, _, _ = _times(None, probe_engine)
    assert len(probe) == len(reader) == 2  # one per core
    # Every access to the data after the barrier waits for its release, on both cores.
    assert min(reader) >= release
    if probe_engine == barrier_engine:
        assert min(probe) >= release
    else:
        # Core 1 (the second of each pair after the barrier) reaches it early; its probe on another engine runs before the
        # release (core 0 is still working), exactly when it would without a barrier.
        assert probe[1] < release
        # (Without the barrier the cores' instructions interleave in another order: compare
        # the two cores' times as a set.)
        assert sorted(probe) == sorted(free_probe)


def test_a_barrier_on_the_tensor_engine_holds_it_and_lets_the_vector_engine_run():
    probe, _, release = _times(nisa.engine.tensor, nisa.engine.vector)
    assert probe[1] < release


def test_the_numbers_do_not_depend_on_the_barriers_engine():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (2 * ROWS, COLS)).astype(np.float32)
    a, b = x[:ROWS], x[ROWS:]
    # Core 0 stores its peer's half b * 2 plus (a + 1), core 1 a * 64 plus (b + 1), in float32
    # as the engines compute them: the same roundings in the same order, so equal.
    want = np.concatenate([(b * 2) + (a + 1), (a * 64) + (b + 1)])
    for e in ENGINES + [nisa.engine.tensor]:
        np.testing.assert_array_equal(_kernel(e, nisa.engine.vector)[2](x), want)
