"""The selection and gather instructions in the legacy neuronxcc.nki API's form (value-returning
sequence_bounds, range_select and local_gather; select_reduce and nc_stream_shuffle with dst),
in kernels written the legacy way (index grids, nl.load / nl.store), against NumPy."""

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

FP32_MIN = np.finfo(np.float32).min


@nki.jit
def bounds_kernel(ids):
    out = nl.ndarray((1, 2, ids.shape[1]), dtype=ids.dtype, buffer=nl.shared_hbm)
    m, n = ids.shape
    ix, iy, iz = nl.mgrid[0:m, 0:2, 0:n]
    t = nl.ndarray((m, 2, n), dtype=ids.dtype, buffer=nl.sbuf)
    t[ix, iy, iz] = nisa.sequence_bounds(segment_ids=nl.load(ids))
    nl.store(out, value=t)
    return out


def test_legacy_sequence_bounds(capsys):
    ids = np.array([[0, 4, 4, 5, 0, 0, 2, 2, 2]], np.int32)
    out = nki.simulate_kernel(bounds_kernel, ids)
    np.testing.assert_array_equal(out, [[[9, 1, 1, 3, 9, 9, 6, 6, 6],
                                         [-1, 3, 3, 4, -1, -1, 9, 9, 9]]])
    assert "nisa.sequence_bounds(dst=" in capsys.readouterr().err


@nki.jit
def range_kernel(on_true, lo, hi):
    res = nl.ndarray(on_true.shape, dtype=np.float32, buffer=nl.shared_hbm)
    mx = nl.ndarray((on_true.shape[0], 1), dtype=np.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((on_true.shape[0], 1), dtype=np.float32, buffer=nl.sbuf)
    out = nisa.range_select(on_true_tile=nl.load(on_true), comp_op0=np.greater_equal,
                            comp_op1=np.less, bound0=nl.load(lo), bound1=nl.load(hi),
                            reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=r,
                            reduce_op=np.max, range_start=16, on_false_value=nl.fp32.min)
    nl.store(res, value=out)
    nl.store(mx, value=r)
    return res, mx


def test_legacy_range_select():
    rng = np.random.default_rng(50)
    on_true = rng.random((128, 48)).astype(np.float32)
    lo = rng.integers(0, 40, (128, 1)).astype(np.float32)
    hi = (lo + rng.integers(1, 30, (128, 1))).astype(np.float32)
    res, mx = nki.simulate_kernel(range_kernel, on_true, lo, hi)
    idx = 16 + np.arange(48, dtype=np.float32)[None, :]
    expect = np.where((idx >= lo) & (idx < hi), on_true, FP32_MIN)
    np.testing.assert_array_equal(res, expect)
    np.testing.assert_array_equal(mx, expect.max(1, keepdims=True))


@nki.jit
def gather_kernel(src, index):
    out = nl.ndarray((128, 32 * 2), dtype=src.dtype, buffer=nl.shared_hbm)
    g = nisa.local_gather(nl.load(src), nl.load(index), 2, 32)
    nl.store(out, value=g)
    return out


def test_legacy_local_gather():
    rng = np.random.default_rng(51)
    src = rng.standard_normal((128, 40)).astype(np.float32)
    index = (rng.integers(0, 20, (128, 2)) * 2).astype(np.uint16)
    out = nki.simulate_kernel(gather_kernel, src, index)
    expect = np.empty((128, 32, 2), np.float32)
    for core in range(8):
        rows = slice(16 * core, 16 * core + 16)
        offsets = index[rows].flatten(order="F")[:32].astype(np.int64)
        for j, at in enumerate(offsets):
            expect[rows, j] = src[rows, at:at + 2]
    np.testing.assert_array_equal(out, expect.reshape(128, 64))


@nki.jit
def shuffle_select_kernel(a, pred):
    out = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    grid = nl.mgrid[0:32, 0:a.shape[1]]
    nisa.nc_stream_shuffle(src=x[grid.p, grid.x], dst=x[grid.p, grid.x],
                           shuffle_mask=[(i + 1) % 32 for i in range(32)])
    d = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=d, predicate=nl.load(pred), on_true=x, on_false=-1.0)
    nl.store(out, value=d)
    return out


def test_legacy_stream_shuffle_and_select_reduce():
    rng = np.random.default_rng(52)
    a = rng.random((32, 24)).astype(np.float32)
    pred = rng.integers(0, 2, (32, 24)).astype(np.uint8)
    out = nki.simulate_kernel(shuffle_select_kernel, a, pred)
    shuffled = a[[(i + 1) % 32 for i in range(32)]]
    np.testing.assert_array_equal(out, np.where(pred != 0, shuffled, np.float32(-1.0)))
