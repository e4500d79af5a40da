"""NKI 0.6's selection, gather and cumulative instructions (tensor_scalar_cumulative,
select_reduce, range_select, nonzero_with_count, sequence_bounds, nc_stream_shuffle,
local_gather, nc_n_gather, nl.gather_flattened, dma_compute, activate2 with nl.prelu), each
against a NumPy reference written from AWS's API reference, and their hardware rules."""

import math

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

U32 = np.finfo(np.float32).eps / 2  # FP32's unit roundoff
FP32_MIN = np.finfo(np.float32).min


def run(kernel, *args):
    return nki.simulate(kernel)(*args)


def to_bfloat16(x):
    """FP32 values rounded to bfloat16 (nearest, ties to even), as FP32."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return r.astype(np.uint32).view(np.float32)


def sequential_bound(terms):
    """The error bound of a sequential FP32 sum, element by element of its running sums: the
    k-th running sum is within k * u * sum(|terms[:k]|) of the exact one."""
    k = np.arange(1, terms.shape[-1] + 1)
    return 1.01 * k * U32 * np.cumsum(np.abs(terms.astype(np.float64)), axis=-1)


def test_tensor_scalar_cumulative_runs_and_carries_the_register():
    @nki.jit
    def k(a, s):
        first = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        second = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        running_max = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        scale = nl.load(s)
        d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        # A prefix sum of x * scale, then the same again continuing from the register.
        nisa.tensor_scalar_cumulative(dst=d, src=x, op0=nl.multiply, op1=nl.add, imm0=scale)
        nl.store(first, d)
        d2 = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=d2, src=x, op0=nl.multiply, op1=nl.add, imm0=scale,
                                      reduce_cmd=nisa.reduce_cmd.reduce)
        nl.store(second, d2)
        # A running maximum of x + 1 starting from 0.5 (load_reduce).
        d3 = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=d3, src=x, op0=nl.add, op1=nl.maximum, imm0=1.0,
                                      imm1=0.5, reduce_cmd=nisa.reduce_cmd.load_reduce)
        nl.store(running_max, d3)
        return first, second, running_max

    rng = np.random.default_rng(30)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    s = rng.uniform(0.5, 2.0, (128, 1)).astype(np.float32)
    first, second, running_max = run(k, a, s)
    terms = (a * s).astype(np.float32)  # one rounding per product, as the engine's op0
    both = np.concatenate([terms, terms], axis=1)
    exact = np.cumsum(both.astype(np.float64), axis=1)
    bound = sequential_bound(both)
    np.testing.assert_array_less(np.abs(np.concatenate([first, second], 1) - exact), bound + 1e-30)
    np.testing.assert_array_equal(running_max,
                                  np.maximum.accumulate(np.maximum(a + np.float32(1), 0.5), 1))


def test_tensor_scalar_cumulative_rules():
    def kernel(op1, dtype=nl.float32, cmd=nisa.reduce_cmd.reset_reduce):
        @nki.jit
        def k(a):
            x = nl.ndarray(a.shape, dtype, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(dst=x, src=x, op0=nl.add, op1=op1, imm0=0.0,
                                          reduce_cmd=cmd)
            return a
        return k

    a = np.zeros((128, 8), np.float32)
    with pytest.raises(nki.NkiError, match="op1=nl.subtract is refused"):
        run(kernel(nl.subtract), a)
    with pytest.raises(nki.NkiError, match="allowed: float32"):
        run(kernel(nl.add, nl.int32), a)
    with pytest.raises(nki.NkiError, match="load_reduce starts from imm1"):
        run(kernel(nl.add, cmd=nisa.reduce_cmd.load_reduce), a)
    with pytest.raises(nki.NkiError, match="op1 must be"):
        run(kernel(nl.bitwise_or), a)

    @nki.jit
    def int_operand(a):
        x = nl.load(a)
        s = nl.ndarray((a.shape[0], 1), nl.int16, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=x, src=x, op0=nl.add, op1=nl.add, imm0=s)
        return a

    with pytest.raises(nki.NkiError, match="an imm0 tile must be float32"):
        run(int_operand, a)


def test_select_reduce_selects_and_reduces_the_maximum():
    @nki.jit
    def k(pred, on_true, on_false):
        out = nl.ndarray(on_true.shape, nl.float32, buffer=nl.shared_hbm)
        rev = nl.ndarray(on_true.shape, nl.float32, buffer=nl.shared_hbm)
        mx = nl.ndarray((on_true.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
        p, t, f = nl.load(pred), nl.load(on_true), nl.load(on_false)
        d = nl.ndarray(on_true.shape, nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((on_true.shape[0], 1), nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=d, predicate=p, on_true=t, on_false=f, reduce_res=r,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_op=nl.maximum)
        nl.store(out, d)
        nl.store(mx, r)
        d2 = nl.ndarray(on_true.shape, nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=d2, predicate=p, on_true=t, on_false=-1e30, reverse_pred=True)
        nl.store(rev, d2)
        return out, rev, mx

    rng = np.random.default_rng(31)
    pred = rng.integers(0, 2, (128, 96)).astype(np.uint8)
    on_true = (rng.random((128, 96)) * 100).astype(np.float32)
    on_false = (rng.random((128, 1)) * 100).astype(np.float32)
    out, rev, mx = run(k, pred, on_true, on_false)
    expect = np.where(pred != 0, on_true, on_false)
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(mx, expect.max(axis=1, keepdims=True))
    np.testing.assert_array_equal(rev, np.where(pred == 0, on_true, np.float32(-1e30)))


def test_select_reduce_rules():
    def kernel(pdtype=nl.uint8, reduce_op=nl.maximum):
        @nki.jit
        def k(a):
            t = nl.load(a)
            p = nl.ndarray(a.shape, pdtype, buffer=nl.sbuf)
            d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((a.shape[0], 1), nl.float32, buffer=nl.sbuf)
            nisa.select_reduce(dst=d, predicate=p, on_true=t, on_false=0.0, reduce_res=r,
                               reduce_op=reduce_op)
            return a
        return k

    a = np.zeros((128, 8), np.float32)
    with pytest.raises(nki.NkiError, match="predicate is float32"):
        run(kernel(nl.float32), a)
    with pytest.raises(nki.NkiError, match="reduce_op must be nl.maximum"):
        run(kernel(reduce_op=nl.add), a)


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16])
def test_range_select_masks_by_index_and_chains_its_reduction(dtype):
    @nki.jit(platform_target="trn2")
    def k(on_true, lo, hi):
        out = nl.ndarray(on_true.shape, nl.float32, buffer=nl.shared_hbm)
        mx = nl.ndarray((on_true.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
        t, b0, b1 = nl.load(on_true), nl.load(lo), nl.load(hi)
        d = nl.ndarray(on_true.shape, dtype, buffer=nl.sbuf)
        r = nl.ndarray((on_true.shape[0], 1), nl.float32, buffer=nl.sbuf)
        # Two column blocks of one row: the second continues the first's maximum.
        nisa.range_select(dst=d, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less,
                          bound0=b0, bound1=b1, range_start=32, on_false_value=FP32_MIN)
        nisa.range_select(dst=d, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less,
                          bound0=b0, bound1=b1, range_start=32 + t.shape[1],
                          reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=r)
        nl.store(out, d)
        nl.store(mx, r)
        return out, mx

    rng = np.random.default_rng(32)
    on_true = rng.random((128, 64)).astype(np.float32)
    lo = rng.integers(0, 120, (128, 1)).astype(np.float32)
    hi = (lo + rng.integers(0, 60, (128, 1))).astype(np.float32)
    out, mx = run(k, on_true, lo, hi)

    def block(start):
        idx = start + np.arange(64, dtype=np.float32)[None, :]
        keep = (idx >= lo) & (idx < hi)
        return np.where(keep, on_true, FP32_MIN)

    first, second = block(32), block(96)
    to_dtype = (lambda x: x) if dtype == nl.float32 else to_bfloat16
    # In bfloat16 the FP32_MIN fill rounds to -inf, as AWS's reference notes.
    np.testing.assert_array_equal(out, to_dtype(second))
    np.testing.assert_array_equal(mx, np.maximum(first.max(1, keepdims=True),
                                                 second.max(1, keepdims=True)))


def test_range_select_rules():
    def kernel(target="trn2", on_false=FP32_MIN, cmp=nl.less):
        @nki.jit(platform_target=target)
        def k(a):
            t = nl.load(a)
            b = nl.ndarray((a.shape[0], 1), nl.float32, buffer=nl.sbuf)
            d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
            nisa.range_select(dst=d, on_true_tile=t, comp_op0=cmp, comp_op1=nl.less,
                              bound0=b, bound1=b, on_false_value=on_false)
            return a
        return k

    a = np.zeros((128, 8), np.float32)
    with pytest.raises(nki.NkiError, match="needs NeuronCore-v3"):
        run(kernel("trn1"), a)
    with pytest.raises(nki.NkiError, match="on_false_value must be FP32_MIN"):
        run(kernel(on_false=0.0), a)
    with pytest.raises(nki.NkiError, match="comp_op0 must be"):
        run(kernel(cmp=nl.add), a)


def test_nonzero_with_count_writes_each_cores_first_partition():
    @nki.jit
    def k(a):
        out = nl.ndarray((a.shape[0], a.shape[1] + 1), nl.int32, buffer=nl.shared_hbm)
        x = nl.load(a)
        d = nl.ndarray((a.shape[0], a.shape[1] + 1), nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=d, value=7)
        nisa.nonzero_with_count(dst=d, src=x, index_offset=16, padding_val=-1)
        nl.store(out, d)
        return out

    rng = np.random.default_rng(33)
    a = (rng.random((128, 12)) < 0.4).astype(np.float32) * rng.random((128, 12)).astype(np.float32)
    out = run(k, a)
    expect = np.full((128, 13), 7, np.int32)
    for p in range(0, 128, 16):
        nz = np.flatnonzero(a[p]) + 16
        expect[p, :] = -1
        expect[p, :len(nz)] = nz
        expect[p, 12] = len(nz)
    np.testing.assert_array_equal(out, expect)


def test_nonzero_with_count_rules():
    def kernel(dtype=nl.int32, target="trn2", start=0):
        @nki.jit(platform_target=target)
        def k(a):
            x = nl.ndarray((32, 8), nl.float32, buffer=nl.sbuf)
            d = nl.ndarray((64, 9), dtype, buffer=nl.sbuf)
            nisa.nonzero_with_count(dst=d[start:start + 32, :], src=x)
            return a
        return k

    a = np.zeros((1, 1), np.float32)
    with pytest.raises(nki.NkiError, match="dst is float32; allowed: int32"):
        run(kernel(nl.float32), a)
    with pytest.raises(nki.NkiError, match="needs NeuronCore-v3"):
        run(kernel(target="trn1"), a)
    with pytest.raises(nki.NkiError, match="starts at partition 8"):
        run(kernel(start=8), a)


def sequence_bounds_reference(ids):
    n = len(ids)
    start, end = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):
        start[i] = n if ids[i] == 0 else (start[i - 1] if i and ids[i] == ids[i - 1] else i)
    for i in reversed(range(n)):
        end[i] = -1 if ids[i] == 0 else (end[i + 1] if i + 1 < n and ids[i] == ids[i + 1]
                                         else i + 1)
    return np.stack([start, end])[None]


@pytest.mark.parametrize("dtype", [nl.int32, nl.float32])
def test_sequence_bounds(dtype):
    @nki.jit
    def k(ids):
        out = nl.ndarray((1, 2, ids.shape[1]), dtype, buffer=nl.shared_hbm)
        d = nl.ndarray((1, 2, ids.shape[1]), dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=d, segment_ids=nl.load(ids))
        nl.store(out, d)
        return out

    # AWS's documented example, then sorted random segments with padding.
    example = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], dtype=dtype.dtype)
    np.testing.assert_array_equal(run(k, example),
                                  [[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]])
    rng = np.random.default_rng(34)
    ids = np.sort(rng.integers(0, 20, 200)).reshape(1, 200).astype(dtype.dtype)
    np.testing.assert_array_equal(run(k, ids), sequence_bounds_reference(ids[0]))


def test_sequence_bounds_rules():
    @nki.jit
    def k(a):
        x = nl.ndarray((2, 8), nl.float32, buffer=nl.sbuf)
        d = nl.ndarray((2, 2, 8), nl.float32, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=d, segment_ids=x)
        return a

    with pytest.raises(nki.NkiError, match="partition dim 1"):
        run(k, np.zeros((1, 1), np.float32))


def test_nc_stream_shuffle_rotates_broadcasts_and_keeps_masked_partitions():
    rotate = [(i - 1) % 32 for i in range(32)]

    @nki.jit
    def k(a, row):
        rot = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        bc = nl.ndarray((32, a.shape[1]), nl.float32, buffer=nl.shared_hbm)
        kept = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        # In place, every quadrant of 128 partitions rotated by one.
        nisa.nc_stream_shuffle(dst=x, src=x, shuffle_mask=rotate)
        nl.store(rot, x)
        # One partition broadcast to 32, into the second quadrant of a tile.
        r = nl.load(row)
        b = nl.ndarray((64, a.shape[1]), nl.float32, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=b[32:64, :], src=r, shuffle_mask=[0] * 32)
        nl.store(bc, b[32:64, :])
        # 255 leaves a partition as it was.
        y = nl.load(a)
        z = nl.load(a)
        nisa.nc_stream_shuffle(dst=z, src=y, shuffle_mask=[255] * 16 + list(range(16)))
        nl.store(kept, z)
        return rot, bc, kept

    rng = np.random.default_rng(35)
    a = rng.random((128, 40)).astype(np.float32)
    row = rng.random((1, 40)).astype(np.float32)
    rot, bc, kept = run(k, a, row)
    expect = a.copy()
    for q in range(4):
        expect[q * 32:(q + 1) * 32] = a[[q * 32 + m for m in rotate]]
    np.testing.assert_array_equal(rot, expect)
    np.testing.assert_array_equal(bc, np.repeat(row, 32, 0))
    expect = a.copy()
    for q in range(4):
        expect[q * 32 + 16:(q + 1) * 32] = a[q * 32:q * 32 + 16]
    np.testing.assert_array_equal(kept, expect)


def test_nc_stream_shuffle_rules():
    def kernel(mask, dst_rows=slice(0, 32), src_rows=slice(0, 32)):
        @nki.jit
        def k(a):
            x = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
            d = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(dst=d[dst_rows, :], src=x[src_rows, :], shuffle_mask=mask)
            return a
        return k

    a = np.zeros((1, 1), np.float32)
    with pytest.raises(nki.NkiError, match=r"shuffle_mask\[3\] = 40"):
        run(kernel([0, 1, 2, 40] + [0] * 28), a)
    with pytest.raises(nki.NkiError, match="32 entries"):
        run(kernel([0] * 31), a)
    with pytest.raises(nki.NkiError, match="start must be one of"):
        run(kernel([0] * 32, dst_rows=slice(32, 96), src_rows=slice(0, 64)), a)
    # A source too small for the quadrant's mask: found when the instruction runs.
    with pytest.raises(ValueError, match="reads partition 1 of a source of 1 partitions"):
        run(kernel([1] * 32, src_rows=slice(0, 1)), a)


def local_gather_reference(src, index, per_idx, valid):
    p = src.shape[0]
    flat = src.reshape(p, -1)
    out = np.empty((p, valid, per_idx), src.dtype)
    for core in range(p // 16):
        rows = slice(core * 16, core * 16 + 16)
        offsets = index[rows].reshape(16, -1).flatten(order="F")[:valid].astype(np.int64)
        for j, at in enumerate(offsets):
            out[rows, j, :] = flat[rows, at:at + per_idx]
    return out.reshape(p, -1)


def test_local_gather_reads_its_indices_when_it_runs():
    @nki.jit
    def k(src, index):
        out = nl.ndarray((128, 48 * 4), nl.float16, buffer=nl.shared_hbm)
        s, i = nl.load(src), nl.load(index)
        d = nl.ndarray((128, 48 * 4), nl.float16, buffer=nl.sbuf)
        nisa.local_gather(dst=d, src_buffer=s, index=i, num_elem_per_idx=4, num_valid_indices=48)
        nl.store(out, d)
        return out

    rng = np.random.default_rng(36)
    src = rng.standard_normal((128, 64, 4)).astype(np.float16)
    per_core = rng.integers(0, 64, (16, 4)).astype(np.uint16) * 4
    index = np.tile(per_core, (8, 1))
    index[16:32] = rng.integers(0, 64, (16, 4)).astype(np.uint16) * 4  # core 1: its own
    out = run(k, src, index)
    np.testing.assert_array_equal(out, local_gather_reference(src, index, 4, 48))
    # An index whose elements reach past the partition: an error naming it, never a read.
    index[17, 2] = 254
    with pytest.raises(ValueError, match=r"index 254 \(index tile partition 17, element 2\) "
                                         r"reads elements \[254, 258\)"):
        run(k, src, index)


def test_local_gather_rules():
    def kernel(index_dtype=nl.uint16, per_idx=1, parts=128, dst_free=64):
        @nki.jit
        def k(a):
            s = nl.ndarray((parts, 64), nl.float32, buffer=nl.sbuf)
            i = nl.ndarray((parts, 4), index_dtype, buffer=nl.sbuf)
            d = nl.ndarray((parts, dst_free), nl.float32, buffer=nl.sbuf)
            nisa.local_gather(dst=d, src_buffer=s, index=i, num_elem_per_idx=per_idx)
            return a
        return k

    a = np.zeros((1, 1), np.float32)
    with pytest.raises(nki.NkiError, match="index is int32; allowed: uint16"):
        run(kernel(nl.int32), a)
    with pytest.raises(nki.NkiError, match="num_elem_per_idx must be"):
        run(kernel(per_idx=3), a)
    with pytest.raises(nki.NkiError, match="a multiple of 16"):
        run(kernel(parts=24), a)
    with pytest.raises(nki.NkiError, match=r"dst must be \[128, 64\]"):
        run(kernel(dst_free=32), a)


def test_nc_n_gather_and_gather_flattened():
    @nki.jit
    def k(data, idx, idx32):
        out = nl.ndarray(idx.shape, nl.int32, buffer=nl.shared_hbm)
        flat = nl.ndarray(idx.shape, nl.float32, buffer=nl.shared_hbm)
        x, i = nl.load(data), nl.load(idx)
        d = nl.ndarray(idx.shape, nl.int32, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=d, data=x, indices=i)
        nl.store(out, d)
        g = nl.gather_flattened(data=x, indices=nl.load(idx32), dtype=nl.float32)
        nl.store(flat, g)
        return out, flat

    rng = np.random.default_rng(37)
    # int32 values beyond float32's 2^24: the gather moves bits, not values.
    data = rng.integers(-2**31, 2**31 - 1, (64, 8, 16)).astype(np.int32)
    idx = rng.integers(0, 128, (64, 40)).astype(np.uint32)
    out, flat = run(k, data, idx, idx.astype(np.int32))
    expect = np.take_along_axis(data.reshape(64, -1), idx.astype(np.int64), 1)
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(flat, expect.astype(np.float32))
    idx[5, 7] = 128
    with pytest.raises(ValueError, match=r"index 128 at partition 5, element 7 is out of "
                                         r"range \[0, 128\)"):
        run(k, data, idx, idx.astype(np.int32))
    bad = idx.astype(np.int32)
    bad[5, 7] = -3
    with pytest.raises(ValueError, match="index -3 at partition 5"):
        run(k, data, idx % 128, bad)


def test_gather_rules():
    def kernel(index_dtype=nl.uint32, axis=0):
        @nki.jit
        def k(a):
            x = nl.ndarray((64, 16), nl.float32, buffer=nl.sbuf)
            i = nl.ndarray((64, 4), index_dtype, buffer=nl.sbuf)
            d = nl.ndarray((64, 4), nl.float32, buffer=nl.sbuf)
            if axis is None:
                nisa.nc_n_gather(dst=d, data=x, indices=i)
            else:
                nl.gather_flattened(x, i, axis=axis)
            return a
        return k

    a = np.zeros((1, 1), np.float32)
    with pytest.raises(nki.NkiError, match="indices is int32; allowed: uint32"):
        run(kernel(nl.int32, axis=None), a)
    with pytest.raises(nki.NkiError, match="only axis=0"):
        run(kernel(axis=1), a)


def test_dma_compute_sums_its_sources_in_fp32():
    @nki.jit
    def k(a, b, c):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        out3 = nl.ndarray(a.shape, nl.float16, buffer=nl.shared_hbm)
        s = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_compute(dst=s, srcs=[a, b], reduce_op=nl.add, scales=[1.0, 1.0])
        nl.store(out, s)
        # HBM to HBM, three sources, rounded once to float16 at the end.
        nisa.dma_compute(dst=out3, srcs=[a, b, c], reduce_op=nl.add)
        return out, out3

    rng = np.random.default_rng(38)
    a = rng.standard_normal((128, 96)).astype(np.float32)
    b = rng.standard_normal((128, 96)).astype(np.float16)
    c = rng.standard_normal((128, 96)).astype(np.float32)
    out, out3 = run(k, a, b, c)
    two = a + b.astype(np.float32)
    np.testing.assert_array_equal(out, two)
    np.testing.assert_array_equal(out3, (two + c).astype(np.float16))
    # The DMA engines carry it: no compute engine ran.
    assert {e for e, n in k.last_run.instructions.items() if n} == {"dma"}


def test_dma_compute_rules():
    def kernel(**kw):
        @nki.jit
        def k(a):
            s = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
            nisa.dma_compute(dst=s, srcs=[a, a], **kw)
            return a
        return k

    a = np.zeros((128, 8), np.float32)
    with pytest.raises(nki.NkiError, match="reduce_op must be nl.add"):
        run(kernel(reduce_op=nl.multiply), a)
    with pytest.raises(nki.NkiError, match="scales must be one 1.0 per source"):
        run(kernel(reduce_op=nl.add, scales=[1.0, 2.0]), a)


def test_dma_compute_with_sixteen_sources():
    def kernel(dtype):
        @nki.jit
        def k(*srcs):
            out = nl.ndarray(srcs[0].shape, dtype, buffer=nl.shared_hbm)
            nisa.dma_compute(dst=out, srcs=list(srcs), reduce_op=nl.add)
            return out
        return k

    rng = np.random.default_rng(41)
    srcs = [rng.standard_normal((64, 32)).astype(np.float32) for _ in range(16)]
    expect = srcs[0]
    for x in srcs[1:]:
        expect = expect + x  # FP32, in source order
    np.testing.assert_array_equal(run(kernel(nl.float32), *srcs), expect)
    # A float16 dst: the same FP32 sum, rounded once at the end.
    np.testing.assert_array_equal(run(kernel(nl.float16), *srcs), expect.astype(np.float16))
    for n in (7, 11, 12):  # one, two and three instructions' worth of sources
        expect = srcs[0]
        for x in srcs[1:n]:
            expect = expect + x
        np.testing.assert_array_equal(run(kernel(nl.float16), *srcs[:n]),
                                      expect.astype(np.float16))


def test_dma_compute_with_more_than_six_sources_reads_a_source_that_is_dst_first():
    @nki.jit
    def k(*srcs):
        t = nl.ndarray(srcs[0].shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=srcs[0])
        nisa.dma_compute(dst=t, srcs=list(srcs[1:]) + [t], reduce_op=nl.add)
        out = nl.ndarray(srcs[0].shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    # dst is the last of 8 sources: read as it was before the call, in source order.
    rng = np.random.default_rng(42)
    srcs = [rng.standard_normal((16, 8)).astype(np.float32) for _ in range(8)]
    expect = srcs[1]
    for x in srcs[2:] + [srcs[0]]:
        expect = expect + x
    np.testing.assert_array_equal(run(k, *srcs), expect)


def test_activate2_pipeline_prelu_and_reduction():
    @nki.jit(platform_target="trn3")
    def k(a, slope, bias):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        rev = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        sums = nl.ndarray((a.shape[0], 2), nl.float32, buffer=nl.shared_hbm)
        x, s, b = nl.load(a), nl.load(slope), nl.load(bias)
        d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((a.shape[0], 2), nl.float32, buffer=nl.sbuf)
        # prelu(x * 2 - bias, slope), its row sums through the Scalar engine's accumulators.
        nisa.activate2(dst=d, op=nl.prelu, data=x, imm0=2.0, imm1=b, op0=nl.multiply,
                       op1=nl.subtract, relu_param=s, reduce_op=nl.add, reduce_res=r[:, 0:1],
                       reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nl.store(out, d)
        # bias - x (reverse0), relu: the accumulators left as they were (idle) and read out.
        d2 = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.activate2(dst=d2, op=nl.relu, data=x, imm0=b, imm1=0.0, op0=nl.subtract,
                       op1=nl.bypass, reverse0=True, reduce_op=nl.add, reduce_res=r[:, 1:2])
        nl.store(rev, d2)
        nl.store(sums, r)
        return out, rev, sums

    rng = np.random.default_rng(39)
    a = rng.standard_normal((128, 80)).astype(np.float32)
    slope = rng.uniform(0.01, 0.3, (128, 1)).astype(np.float32)
    bias = rng.standard_normal((128, 1)).astype(np.float32)
    out, rev, sums = run(k, a, slope, bias)
    v = a * np.float32(2) - bias
    expect = np.where(v > 0, v, slope * v)
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(rev, np.maximum(bias - a, 0))
    bound = sequential_bound(expect)[:, -1:]
    np.testing.assert_array_less(np.abs(sums[:, :1] - expect.astype(np.float64).sum(1, keepdims=True)),
                                 bound + 1e-30)
    np.testing.assert_array_equal(sums[:, 1:], sums[:, :1])


def test_activate2_rules_and_prelu_outside_it():
    def kernel(target="trn3", op0=nl.multiply, op1=nl.add, **kw):
        @nki.jit(platform_target=target)
        def k(a):
            x = nl.load(a)
            d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
            nisa.activate2(dst=d, op=nl.gelu, data=x, imm0=1.0, imm1=0.0, op0=op0, op1=op1, **kw)
            return a
        return k

    a = np.zeros((128, 8), np.float32)
    with pytest.raises(nki.NkiError, match="needs NeuronCore-v4"):
        run(kernel("trn2"), a)
    with pytest.raises(nki.NkiError, match="is not one of the six"):
        run(kernel(op0=nl.add, op1=nl.add), a)
    with pytest.raises(nki.NkiError, match="load_reduce is not an activate2 command"):
        run(kernel(reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.load_reduce), a)
    # gelu through the pipeline: scale 1, bias 0.
    ok = run(kernel(), np.linspace(-3, 3, 128 * 8, dtype=np.float32).reshape(128, 8))
    assert ok.shape == (128, 8)

    @nki.jit(platform_target="trn3")
    def prelu_in_activation(a):
        d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=d, op=nl.prelu, data=nl.load(a))
        return a

    with pytest.raises(nki.NkiError, match="use nisa.activate2"):
        run(prelu_in_activation, a)


def test_activate2_gelu_against_its_definition():
    @nki.jit(platform_target="trn3")
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.activate2(dst=d, op=nl.gelu, data=nl.load(a), imm0=2.0, imm1=0.5, op0=nl.multiply,
                       op1=nl.add)
        nl.store(out, d)
        return out

    a = np.linspace(-3, 3, 128 * 16, dtype=np.float32).reshape(128, 16)
    v = (a * np.float32(2) + np.float32(0.5)).astype(np.float64)
    expect = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    # FP32 evaluation: erf to a few ulp, then three roundings.
    np.testing.assert_allclose(run(k, a), expect, rtol=16 * U32, atol=16 * U32)


def topk_reference(src, n, k, vals, idx):
    """AWS's snake layout: per 16-partition group, value e at (e % 16, e // 16); the K largest
    in ascending order back in that layout; the last column's slots past K unspecified (NaN /
    all-ones here); later columns untouched. Ties: the lower index ranks higher."""
    vals, idx = vals.copy(), idx.copy()
    for g in range(src.shape[0] // 16):
        snake = [src[g * 16 + e % 16, e // 16] for e in range(n)]
        order = sorted(range(n), key=lambda e: (-snake[e], e))[:k][::-1]
        for j in range(-(-k // 16) * 16):
            at = (g * 16 + j % 16, j // 16)
            vals[at], idx[at] = (snake[order[j]], order[j]) if j < k else (np.nan, 0xFFFFFFFF)
    return vals, idx


def test_topk_per_16_partition_snake():
    n, k = 42, 20

    @nki.jit
    def kern(a):
        vals = nl.ndarray((32, k), nl.float32, buffer=nl.shared_hbm)
        idx = nl.ndarray((32, k), nl.uint32, buffer=nl.shared_hbm)
        s = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=nl.load(a))
        v = nl.ndarray((32, k), nl.bfloat16, buffer=nl.sbuf)
        i = nl.ndarray((32, k), nl.uint32, buffer=nl.sbuf)
        nisa.memset(dst=v, value=5.0)
        nisa.memset(dst=i, value=7)
        nisa.topk(val_dst=v, idx_dst=i, src=s, n=n)
        v32 = nl.ndarray((32, k), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=v32, src=v)
        nl.store(vals, v32)
        nl.store(idx, i)
        return vals, idx

    rng = np.random.default_rng(40)
    # Integers below 256 are exact in bfloat16; a few repeats exercise ties.
    a = rng.integers(0, 60, (32, 3)).astype(np.float32)
    vals, idx = run(kern, a)
    ev, ei = topk_reference(a, n, k, np.full((32, k), 5, np.float32),
                            np.full((32, k), 7, np.uint32))
    np.testing.assert_array_equal(vals, ev)
    np.testing.assert_array_equal(idx, ei)


def test_topk_rules():
    def kernel(parts=32, n=42, k=8, dtype=nl.bfloat16):
        @nki.jit
        def kern(a):
            s = nl.ndarray((parts, 3), dtype, buffer=nl.sbuf)
            v = nl.ndarray((parts, k), nl.bfloat16, buffer=nl.sbuf)
            i = nl.ndarray((parts, k), nl.uint32, buffer=nl.sbuf)
            nisa.topk(val_dst=v, idx_dst=i, src=s, n=n)
            return a
        return kern

    a = np.zeros((1, 1), np.float32)
    with pytest.raises(nki.NkiError, match="a multiple of 16"):
        run(kernel(parts=24), a)
    with pytest.raises(nki.NkiError, match="needs 4 columns"):
        run(kernel(n=50), a)
    with pytest.raises(nki.NkiError, match=r"<= n \(42\)"):
        run(kernel(k=43), a)
    with pytest.raises(nki.NkiError, match="src is float32; allowed: bfloat16"):
        run(kernel(dtype=nl.float32), a)


def test_each_instruction_runs_on_its_documented_engine():
    @nki.jit(platform_target="trn3")
    def k(a):
        x = nl.load(a)
        d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        pred = nl.ndarray(a.shape, nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=pred, value=1, engine=nisa.engine.gpsimd)
        nisa.tensor_scalar_cumulative(dst=d, src=x, op0=nl.add, op1=nl.add, imm0=0.0)  # vector
        nisa.select_reduce(dst=d, predicate=pred, on_true=x, on_false=0.0)  # vector
        nisa.nc_stream_shuffle(dst=d, src=x, shuffle_mask=list(range(32)))  # vector
        ids = nl.ndarray((128, 17), nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=ids, src=x)  # gpsimd
        nisa.activate2(dst=d, op=nl.prelu, data=x, imm0=1.0, imm1=0.0, op0=nl.multiply,
                       op1=nl.bypass, relu_param=0.1)  # scalar
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_compute(dst=out, srcs=[d, x], reduce_op=nl.add)  # dma
        return out

    run(k, np.ones((128, 16), np.float32))
    counts = k.last_run.instructions
    assert counts["vector"] == 3 and counts["gpsimd"] == 2 and counts["scalar"] == 1
    assert counts["dma"] == 2 and counts["tensor"] == 0


def test_modelled_costs_follow_the_nearest_instruction():
    """dma_compute pays a copy's descriptors once per source; a gather costs the elements it
    writes, not the size of the tile it reads from."""
    def dma(sources):
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
            if sources == 0:
                nisa.dma_copy(dst=out, src=a)
            else:
                nisa.dma_compute(dst=out, srcs=[a] * sources, reduce_op=nl.add)
            return out
        return k.specialize((np.ones((128, 512), np.float32),), {}).timeline()["dma_descriptors"]

    copy, two, four = dma(0), dma(2), dma(4)
    assert two == 2 * copy and four == 4 * copy

    def gather(data_free):
        @nki.jit
        def k(a):
            x = nl.ndarray((128, data_free), nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=x, value=0.0, engine=nisa.engine.gpsimd)
            i = nl.ndarray((128, 64), nl.uint32, buffer=nl.sbuf)
            nisa.memset(dst=i, value=0, engine=nisa.engine.gpsimd)
            d = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.nc_n_gather(dst=d, data=x, indices=i)
            return a
        return nki.jit(k.fn).specialize((np.ones((1, 1), np.float32),), {}).timeline()

    small, large = gather(64), gather(4096)
    # Same gather, sources of 64 and 4096 elements per partition: the gather itself costs the
    # same (the memsets differ).
    def last(t):
        start, end = t["instruction_times_ns"][-1]
        return end - start

    assert last(small) == pytest.approx(last(large))


def test_optional_hbm_arguments_are_true_and_tiles_have_no_truth_value():
    """AWS's kernels test optional arguments with `if t` (the MoE kernels of AWS's library, the
    tensor_scalar_cumulative examples): an HBM tensor is true. A tile's truth would depend on
    values that do not exist at specialisation time: refused."""
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        if b:
            x = nl.add(x, nl.load(b))
        nl.store(out, x)
        return out

    a = np.ones((128, 4), np.float32)
    np.testing.assert_array_equal(run(k, a, a), a + a)

    # An on-chip tile is true too (AWS's moe_block tests an SBUF field with `if`), said with a
    # warning at the kernel's line, since its values cannot be what is tested.
    @nki.jit
    def tile_truth(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        if x:
            x = nl.add(x, x)
        nl.store(out, x)
        return out

    with pytest.warns(UserWarning, match=r"test_isa_selection\.py:\d+ in kernel 'tile_truth': "
                                         r"`if` on an on-chip tensor is always true"):
        np.testing.assert_array_equal(run(tile_truth, np.zeros_like(a)), np.zeros_like(a))
