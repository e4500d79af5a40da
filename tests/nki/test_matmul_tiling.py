"""nisa.nc_matmul's tiling mode (AWS's stub, "Tiling mode"): tile_position / tile_size pick a
part of the 128 x 128 PE array (rows: the contraction partitions; columns: the stationary's free
size), and matmuls on disjoint tiles run at the same time. Values against NumPy; the modelled
times against the rule (disjoint tiles overlap, shared cells take turns), not fixed figures."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki import _core


def tiled(k, m, n, tiles, target="trn2"):
    """One matmul per (tile_position, tile_size) in `tiles`, all of the same stationary [k, m]
    and moving [k, n] (loaded once, so every matmul is ready at the same time), each into its
    own PSUM tile; out[j] = stationary.T @ moving for each."""
    @nki.jit(platform_target=target)
    def kern(s, mv):
        st = nl.ndarray((k, m), nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=st, src=s)
        mo = nl.ndarray((k, n), nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=mo, src=mv)
        out = nl.ndarray((len(tiles), m, n), nl.float32, buffer=nl.shared_hbm)
        for j, (pos, size) in enumerate(tiles):
            ps = nl.ndarray((m, n), nl.float32, buffer=nl.psum)
            if pos is None:
                nisa.nc_matmul(dst=ps, stationary=st, moving=mo)
            else:
                nisa.nc_matmul(dst=ps, stationary=st, moving=mo, tile_position=pos,
                               tile_size=size)
            sb = nl.ndarray((m, n), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=sb, src=ps)
            nisa.dma_copy(dst=out[j], src=sb)
        return out
    return kern


def matmul_times(kern, k, m, n):
    s = np.zeros((k, m), np.float32)
    mv = np.zeros((k, n), np.float32)
    spec = kern.specialize((s, mv), {})
    times = spec.timeline()["instruction_times_ns"]
    return [times[i] for i, op in enumerate(spec.opcodes) if op == _core.OP_MATMUL]


def span(times):
    return max(e for _, e in times) - min(s for s, _ in times)


def one(times):
    return times[0][1] - times[0][0]


def test_tiled_matmuls_compute_what_the_whole_array_computes():
    # Small integers: exact in bfloat16 and in the FP32 sums, so the result is exact.
    rng = np.random.default_rng(3)
    s = rng.integers(-8, 8, (32, 32)).astype(np.float32)
    mv = rng.integers(-8, 8, (32, 256)).astype(np.float32)
    tiles = [((0, 0), (32, 32)), ((32, 96), (32, 32)), ((64, 0), (64, 128)), (None, None)]
    got = nki.simulate(tiled(32, 32, 256, tiles))(s, mv)
    for j in range(len(tiles)):
        np.testing.assert_array_equal(got[j], s.T @ mv)


def test_four_matmuls_on_four_disjoint_tiles_take_the_time_of_one():
    diagonal = [((32 * i, 32 * i), (32, 32)) for i in range(4)]
    times = matmul_times(tiled(32, 32, 512, diagonal), 32, 32, 512)
    assert len(times) == 4
    assert span(times) == pytest.approx(one(times), rel=1e-9)
    # Four row tiles of 32 (whole columns each) overlap the same way.
    rows = [((32 * i, 0), (32, 128)) for i in range(4)]
    times = matmul_times(tiled(32, 32, 512, rows), 32, 32, 512)
    assert span(times) == pytest.approx(one(times), rel=1e-9)


def test_matmuls_on_the_same_or_overlapping_tiles_take_turns():
    same = [((32, 32), (32, 32))] * 2
    times = matmul_times(tiled(32, 32, 512, same), 32, 32, 512)
    assert span(times) == pytest.approx(2 * one(times), rel=1e-9)
    # A 64-row tile at row 0 and a 32-row tile at row 32 share cells.
    overlap = [((0, 0), (64, 128)), ((32, 0), (32, 128))]
    times = matmul_times(tiled(32, 32, 512, overlap), 32, 32, 512)
    assert span(times) == pytest.approx(2 * one(times), rel=1e-9)
    # Without tile_position / tile_size a matmul holds the whole array: it waits for the tiled
    # ones, and they for it.
    mixed = [((0, 0), (32, 32)), (None, None), ((96, 96), (32, 32))]
    times = matmul_times(tiled(32, 32, 512, mixed), 32, 32, 512)
    assert span(times) == pytest.approx(3 * one(times), rel=1e-9)


def test_the_tensor_engine_busy_time_counts_overlapping_matmuls_once():
    diagonal = [((32 * i, 32 * i), (32, 32)) for i in range(4)]
    kern = tiled(32, 32, 512, diagonal)
    spec = kern.specialize((np.zeros((32, 32), np.float32), np.zeros((32, 512), np.float32)),
                           {})
    t = spec.timeline()
    times = [t["instruction_times_ns"][i] for i, op in enumerate(spec.opcodes)
             if op == _core.OP_MATMUL]
    assert t["busy_ns"]["tensor"] == pytest.approx(one(times), rel=1e-9)


def _tiling_kernel(pos, size, k=32, m=32, target="trn2"):
    return tiled(k, m, 64, [(pos, size)], target=target)


@pytest.mark.parametrize("pos, size, kw, message", [
    ((0, 0), None, {}, "tile_position and tile_size are set together"),
    ((0, 0), (32, 32), dict(target="trn1"), "tiles of \\[64, 128\\] on NeuronCore-v2"),
    ((16, 0), (32, 32), {}, "starts at a multiple of 32"),
    ((0, 128), (32, 32), {}, "starts at a multiple of 32 below 128"),
    ((0, 0), (48, 32), {}, "a row tile of 48"),
    ((0, 0), (32, 32), dict(k=64), "exceeds tile_size"),
    ((0, 0), (64, 32), dict(m=64), "exceeds tile_size"),
])
def test_tiling_rules_are_refused_by_name(pos, size, kw, message):
    with pytest.raises(nki.NkiError, match=message):
        nki.simulate(_tiling_kernel(pos, size, **kw))(np.zeros((kw.get("k", 32), kw.get("m", 32)),
                                                               np.float32),
                                                      np.zeros((kw.get("k", 32), 64), np.float32))
