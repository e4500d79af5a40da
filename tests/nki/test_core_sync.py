"""Cross-core synchronisation of an LNC=2 launch (kernel[2]: program k on logical core k):
nisa.core_barrier and nisa.sendrecv, against NumPy references; the rules (LNC=2, ranks, pairs
that match; a barrier one core never reaches is an error, not a hang); and the modelled time
(a barrier aligns both cores' timelines, a transfer is a DMA of its bytes)."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki._core import OP_BARRIER, OP_DMA, NkiError

ROWS, COLS = 64, 32


@nki.jit
def exchange_through_hbm(x):
    """Core k writes 2^(k+1) * its half of x (core 0 after a longer chain of work), then, after
    the barrier, reads the other core's half and stores it plus one."""
    shared = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[i * ROWS:(i + 1) * ROWS, :])
    for _ in range(6 if i == 0 else 1):  # core 0 reaches its store much later than core 1
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0 if i == 0 else 1.0)
    if i == 1:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=4.0)
    nisa.dma_copy(dst=shared[i * ROWS:(i + 1) * ROWS, :], src=t)
    nisa.core_barrier(shared, (0, 1))
    j = 1 - i
    u = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=shared[j * ROWS:(j + 1) * ROWS, :])
    nisa.tensor_scalar(dst=u, data=u, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out[i * ROWS:(i + 1) * ROWS, :], src=u)
    return out


def _halves(x):
    return x[:ROWS], x[ROWS:]


def test_core_barrier_makes_one_cores_writes_visible_to_the_other():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2 * ROWS, COLS)).astype(np.float32)
    out = exchange_through_hbm[2](x)
    a, b = _halves(x)
    # Scalings by powers of two and one addition of 1: exact in float32 except the final add,
    # which rounds once (tolerance: half an ulp of the result).
    ref = np.concatenate([b * 4.0 + 1.0, a * 64.0 + 1.0]).astype(np.float32)
    np.testing.assert_allclose(out, ref, rtol=np.finfo(np.float32).eps, atol=0)


def test_core_barrier_aligns_both_cores_timelines():
    x = np.ones((2 * ROWS, COLS), np.float32)
    exchange_through_hbm[2](x)
    spec = exchange_through_hbm.specialize((x,), {}, grid=(2,))
    times = spec.timeline()["instruction_times_ns"]
    ops = spec.opcodes
    barriers = [k for k, op in enumerate(ops) if op == OP_BARRIER]
    assert len(barriers) == 2  # one per core, next to each other
    assert barriers[1] == barriers[0] + 1
    before = max(t[1] for t in times[:barriers[0]])
    release = times[barriers[0]][1]
    assert release > before
    assert times[barriers[1]][1] == release  # one release for both cores
    # Nothing after the barrier starts before its release, on either core: every instruction
    # after it reads `shared` (the barrier's data) or what such a read produced.
    assert all(t[0] >= release for t in times[barriers[1] + 1:])


@nki.jit
def swap_halves(x):
    """Each core sends its half of x to the other (sendrecv); stores received * 2 + its own."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    mine = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
    theirs = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[i * ROWS:(i + 1) * ROWS, :])
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - i, recv_from_rank=1 - i, pipe_id=0)
    nisa.scalar_tensor_tensor(dst=theirs, data=theirs, op0=nl.multiply, operand0=2.0,
                              op1=nl.add, operand1=mine)
    nisa.dma_copy(dst=out[i * ROWS:(i + 1) * ROWS, :], src=theirs)
    return out


def test_sendrecv_exchanges_tiles_between_the_cores():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (2 * ROWS, COLS)).astype(np.float32)
    out = swap_halves[2](x)
    a, b = _halves(x)
    ref = np.concatenate([b * 2 + a, a * 2 + b]).astype(np.float32)
    # One rounding of the sum (the doubling is exact).
    np.testing.assert_allclose(out, ref, rtol=np.finfo(np.float32).eps, atol=1e-7)


@nki.jit
def swap_within_one_tile(x):
    """router_topk's form: one tile, the local half of its free dim sent into the peer's other
    half."""
    out = nl.ndarray((ROWS, 2 * COLS), x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.ndarray((ROWS, 2, COLS), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[:, i, :], src=x[i * ROWS:(i + 1) * ROWS, :])
    nisa.sendrecv(src=t[:, i, :], dst=t[:, 1 - i, :], send_to_rank=1 - i, recv_from_rank=1 - i,
                  pipe_id=3)
    if i == 0:
        nisa.dma_copy(dst=out, src=t.reshape((ROWS, 2 * COLS)))
    return out


def test_sendrecv_between_parts_of_one_tile():
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (2 * ROWS, COLS)).astype(np.float32)
    out = swap_within_one_tile[2](x)
    np.testing.assert_array_equal(out, np.concatenate(_halves(x), axis=1))


def test_sendrecv_costs_a_dma_of_its_bytes_between_barriers():
    x = np.ones((2 * ROWS, COLS), np.float32)
    swap_halves[2](x)
    spec = swap_halves.specialize((x,), {}, grid=(2,))
    times = spec.timeline()["instruction_times_ns"]
    ops = spec.opcodes
    barriers = [k for k, op in enumerate(ops) if op == OP_BARRIER]
    assert len(barriers) == 4  # each core's before and after the transfers
    transfers = range(barriers[1] + 1, barriers[2])
    assert [ops[k] for k in transfers] == [OP_DMA, OP_DMA]
    for k in transfers:
        assert times[k][0] >= times[barriers[1]][1]
        assert times[k][1] > times[k][0]
    assert times[barriers[2]][0] >= max(times[k][1] for k in transfers)
    assert times[barriers[0]][1] == times[barriers[1]][1]
    assert times[barriers[2]][1] == times[barriers[3]][1] > times[barriers[1]][1]


# -- rules


@nki.jit
def barrier_on_core_0_only(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[:ROWS, :])
    if nl.program_id(0) == 0:
        nisa.core_barrier(out, (0, 1))
    nisa.dma_copy(dst=out[:ROWS, :], src=t)
    return out


@nki.jit
def barrier_then_sendrecv(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
    u = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[:ROWS, :])
    if i == 0:
        nisa.core_barrier(out, (0, 1))
    else:
        nisa.sendrecv(src=t, dst=u, send_to_rank=0, recv_from_rank=0, pipe_id=0)
    nisa.dma_copy(dst=out[:ROWS, :], src=t)
    return out


@nki.jit
def sendrecv_with(x, send_to, recv_from, pipe=0, dtype=None, rows=ROWS, engine=None):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.ndarray((rows, COLS), x.dtype, buffer=nl.sbuf)
    u = nl.ndarray((rows, COLS), dtype or x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[:rows, :])
    kw = {} if engine is None else {"dma_engine": engine}
    nisa.sendrecv(src=t, dst=u, send_to_rank=send_to[i], recv_from_rank=recv_from[i],
                  pipe_id=pipe[i] if isinstance(pipe, tuple) else pipe, **kw)
    nisa.dma_copy(dst=out[:rows, :], src=u)
    return out


@nki.jit
def single_core_barrier(x, cores, engine=nisa.engine.gpsimd):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((ROWS, COLS), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[:ROWS, :])
    nisa.dma_copy(dst=out[:ROWS, :], src=t)
    nisa.core_barrier(out, cores, engine=engine)
    nisa.dma_copy(dst=t, src=out[:ROWS, :])
    nisa.dma_copy(dst=out[ROWS:, :], src=t)
    return out


X = np.ones((2 * ROWS, COLS), np.float32)


def test_a_barrier_one_core_never_reaches_is_an_error():
    with pytest.raises(NkiError, match="never reached by core 1"):
        barrier_on_core_0_only[2](X)


def test_synchronisations_that_do_not_pair_up_are_an_error():
    with pytest.raises(NkiError, match="differs between cores"):
        barrier_then_sendrecv[2](X)
    with pytest.raises(NkiError, match="differs between cores"):
        sendrecv_with[2](X, (1, 0), (1, 0), (0, 1))  # different pipes


def test_sendrecv_rules():
    with pytest.raises(NkiError, match="is this core"):
        sendrecv_with[2](X, (0, 0), (1, 0))
    with pytest.raises(NkiError, match="must be 0 or 1"):
        sendrecv_with[2](X, (2, 0), (1, 0))
    with pytest.raises(NkiError, match="same dtype"):
        sendrecv_with[2](X, (1, 0), (1, 0), dtype=nl.bfloat16)
    with pytest.raises(NkiError, match="launch kernel\\[2\\]"):
        sendrecv_with(X, (1, 0), (1, 0))
    with pytest.raises(NkiError, match="grid of 4 programs"):
        sendrecv_with[4](X, (1, 0, 0, 0), (1, 0, 0, 0))
    with pytest.raises(NkiError, match="multiple of 16"):
        sendrecv_with[2](X, (1, 0), (1, 0), rows=8, engine=nisa.dma_engine.gpsimd_dma)
    # gpsimd_dma: at most 1024 bytes per partition of float32 (32 columns = 128 bytes: fine).
    out = sendrecv_with[2](X, (1, 0), (1, 0), engine=nisa.dma_engine.gpsimd_dma)
    np.testing.assert_array_equal(out[:ROWS], X[:ROWS])


def test_sendrecv_refuses_overlapping_src_and_dst():
    @nki.jit
    def overlapping(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.ndarray((ROWS, 2 * COLS), x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=t[:, 0:COLS], dst=t[:, 8:8 + COLS], send_to_rank=1 - i,
                      recv_from_rank=1 - i, pipe_id=0)
        return out

    with pytest.raises(NkiError, match="overlap"):
        overlapping[2](X)


def test_core_barrier_rules():
    # A one-program launch synchronises with itself only: cores=(0,) runs, (0, 1) would wait
    # for a core that never runs.
    out = single_core_barrier(X, (0,))
    np.testing.assert_array_equal(out, X)
    with pytest.raises(NkiError, match="launch kernel\\[2\\] for LNC=2"):
        single_core_barrier(X, (0, 1))
    with pytest.raises(NkiError, match="cores="):
        single_core_barrier[2](X, (0,))
    np.testing.assert_array_equal(single_core_barrier(X, (0,), nisa.engine.vector), X)
    with pytest.raises(NkiError, match="compute engines"):
        single_core_barrier(X, (0,), nisa.engine.dma)


def test_cross_core_calls_need_neuroncore_v3():
    @nki.jit(platform_target="trn1")
    def on_trn1(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.core_barrier(out, (0, 1))
        return out

    with pytest.raises(NkiError, match="needs NeuronCore-v3"):
        on_trn1[2](X)
