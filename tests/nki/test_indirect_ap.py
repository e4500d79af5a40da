"""NKI 0.6's runtime offsets on a DMA's HBM side: ``.ap(vector_offset=, indirect_dim=)`` (a
gather as dma_copy's src, a scatter as its dst), ``.ap(scalar_offset=)`` and ``vector_select``,
checked against NumPy, with the index bounds checked when the kernel runs."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def run(kernel, *args):
    return nki.simulate(kernel)(*args)


@nki.jit
def gather_rows(table, idx):
    # out[p, :] = table[idx[p], :], the index scaled by dim 0's stride (the row length).
    n, d = idx.shape[0], table.shape[1]
    ids = nl.ndarray((n, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    t = nl.ndarray((n, d), table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=table.ap(pattern=[[d, n], [1, d]], offset=0, vector_offset=ids,
                                      indirect_dim=0))
    out = nl.ndarray((n, d), table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def scatter_flat(values, idx, size):
    # A 1-D destination indexed by flat element positions (as a top-k scatter writes one
    # column at a time): out_flat[idx[p]] = values[p, 0]; the pattern's partition stride is
    # replaced by the index's.
    n = idx.shape[0]
    out = nl.ndarray((size.shape[1],), nl.float32, buffer=nl.shared_hbm)
    zero = nl.ndarray((1, size.shape[1]), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    nisa.dma_copy(dst=out.reshape((1, size.shape[1])), src=zero)
    ids = nl.ndarray((n, 1), nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    v = nl.ndarray((n, 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=values)
    nisa.dma_copy(dst=out.ap([[7, n], [1, 1]], offset=0, vector_offset=ids, indirect_dim=0), src=v)
    return out


@nki.jit
def pick_column(logits, targets):
    # out[b, 0] = logits[b, targets[b]], one scalar_offset DMA per row along indirect_dim 1.
    b, v = logits.shape
    tg = nl.ndarray((b, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tg, src=targets)
    got = nl.ndarray((b, 1), nl.float32, buffer=nl.sbuf)
    for r in range(b):
        nisa.dma_copy(dst=got[r:r + 1, :],
                      src=logits.ap(pattern=[[v, 1], [1, 1]], offset=r * v,
                                    scalar_offset=tg.ap(pattern=[[1, 1], [1, 1]], offset=r),
                                    indirect_dim=1))
    out = nl.ndarray((b, 1), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=got)
    return out


def block_writer(oob_mode=nisa.oob_mode.error):
    """cache[start:start + s, :] = block: a scalar offset moving a whole [s, d] tile."""
    @nki.jit
    def k(cache, block, start):
        s, d = block.shape
        st = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=st, src=start)
        t = nl.ndarray((s, d), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=block)
        out = nl.ndarray(cache.shape, nl.float32, buffer=nl.shared_hbm)
        c = nl.ndarray(cache.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c, src=cache)
        nisa.dma_copy(dst=out, src=c)
        nisa.dma_copy(dst=out.ap([[d, s], [1, d]], offset=0, scalar_offset=st, indirect_dim=0),
                      src=t, oob_mode=oob_mode)
        return out
    return k


write_block_at = block_writer()
block_skipping = block_writer(nisa.oob_mode.skip)


@nki.jit
def select_rows(table, idx):
    n = idx.shape[0]
    ids = nl.ndarray((n, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    t = nl.ndarray((n, table.shape[1], table.shape[2]), table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=table.vector_select(0, ids))
    out = nl.ndarray(t.shape, table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_vector_offset_gathers_the_rows_its_indices_name():
    table = np.arange(40 * 6, dtype=np.float32).reshape(40, 6)
    idx = np.array([[3], [39], [0], [3], [17]], np.int32)
    np.testing.assert_array_equal(run(gather_rows, table, idx), table[idx[:, 0]])


def test_vector_offset_scatters_to_flat_positions():
    idx = np.array([[5], [0], [22], [9]], np.uint32)
    values = np.array([[1.5], [2.5], [3.5], [4.5]], np.float32)
    want = np.zeros(23, np.float32)
    want[idx[:, 0]] = values[:, 0]
    np.testing.assert_array_equal(run(scatter_flat, values, idx, np.zeros((1, 23), np.float32)),
                                  want)


def test_a_scatter_with_repeated_indices_keeps_the_last_partitions_value():
    idx = np.array([[4], [1], [4]], np.uint32)
    values = np.array([[1.0], [2.0], [3.0]], np.float32)
    got = run(scatter_flat, values, idx, np.zeros((1, 6), np.float32))
    np.testing.assert_array_equal(got, np.array([0, 2, 0, 0, 3, 0], np.float32))


def test_scalar_offset_reads_one_element_per_row_along_indirect_dim_1():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 11)).astype(np.float32)
    targets = np.array([[0], [10], [3], [3], [7]], np.int32)
    np.testing.assert_array_equal(run(pick_column, logits, targets),
                                  logits[np.arange(5), targets[:, 0]][:, None])


def test_scalar_offset_moves_a_whole_tile():
    cache = np.zeros((10, 4), np.float32)
    block = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    want = cache.copy()
    want[6:9] = block
    np.testing.assert_array_equal(run(write_block_at, cache, block, np.array([[6]], np.int32)),
                                  want)


def test_vector_select_gathers_along_dim_0():
    table = np.arange(9 * 4 * 2, dtype=np.float32).reshape(9, 4, 2)
    idx = np.array([[8], [2], [2], [5]], np.int32)
    np.testing.assert_array_equal(run(select_rows, table, idx), table[idx[:, 0]])


def test_an_index_outside_the_indirect_dim_is_an_error_naming_it():
    table = np.zeros((40, 6), np.float32)
    with pytest.raises(Exception, match="index 40 at partition 1 .*outside \\[0, 40\\)"):
        run(gather_rows, table, np.array([[0], [40]], np.int32))
    with pytest.raises(Exception, match="index -1 at partition 0"):
        run(gather_rows, table, np.array([[-1], [0]], np.int32))
    with pytest.raises(Exception, match="index 11 at partition 0 .*outside \\[0, 11\\)"):
        run(pick_column, np.zeros((2, 11), np.float32), np.array([[0], [11]], np.int32))


def test_a_tile_that_would_run_past_the_tensor_is_an_error():
    # Rows 8 and 9 exist, but a 3-row block placed there would end past the cache.
    cache = np.zeros((10, 4), np.float32)
    block = np.ones((3, 4), np.float32)
    with pytest.raises(Exception, match="index 8 at partition 0 .*outside \\[0, 8\\)"):
        run(write_block_at, cache, block, np.array([[8]], np.int32))


def bad_gather(index_dtype=nl.int32, parts=2, dim=0):
    """A gather breaking one rule: float indices, a pattern of more partitions than indices, or
    an indirect_dim the tensor does not have."""
    @nki.jit
    def k(table, idx):
        ids = nl.ndarray((2, 1), index_dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        t = nl.ndarray((parts, 6), table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=table.ap([[6, parts], [1, 6]], vector_offset=ids,
                                          indirect_dim=dim))
        return table
    return k


@pytest.mark.parametrize("kernel, message", [
    (bad_gather(index_dtype=nl.float32), "32-bit integers"),
    (bad_gather(parts=3), "3 partitions, the vector_offset 2 indices"),
    (bad_gather(dim=2), "indirect_dim=2 is not a dim"),
])
def test_rules_are_refused_by_name(kernel, message):
    with pytest.raises(nki.NkiError, match=message):
        run(kernel, np.zeros((40, 6), np.float32), np.zeros((2, 1), np.int32))


def test_the_legacy_migration_reports_spelling_runs_as_nki_0_6_code():
    """The legacy API's t[b, <index tile>, :] is reported with its NKI 0.6 spelling; that
    spelling, the numbers taken from the report, gives the same rows."""
    import re

    import neuronxcc.nki as lnki
    import neuronxcc.nki.language as lnl

    @lnki.jit
    def legacy(data, idx):
        out = lnl.ndarray((idx.shape[0], data.shape[2]), dtype=data.dtype, buffer=lnl.shared_hbm)
        i_p = lnl.arange(idx.shape[0])[:, None]
        i_f = lnl.arange(data.shape[2])[None, :]
        idx_tile = lnl.load(idx[i_p, 0])
        lnl.store(out[i_p, i_f], value=lnl.load(data[2, idx_tile[i_p, 0], i_f]))
        return out

    rng = np.random.default_rng(1)
    data = rng.standard_normal((3, 10, 6)).astype(np.float32)
    idx = np.array([[9], [0], [4], [4]], np.int32)
    want = data[2, idx[:, 0]]
    np.testing.assert_array_equal(lnki.simulate_kernel(legacy, data, idx), want)
    (spelling,) = [r[3] for r in legacy.migration_report() if "index tile" in r[2]]
    m = re.search(r"pattern=(\[.*?\]\]), offset=(\d+), vector_offset=<index tile>, "
                  r"indirect_dim=(\d+)", spelling)
    pattern, offset, dim = eval(m.group(1)), int(m.group(2)), int(m.group(3))
    assert (offset, dim) == (2 * 10 * 6, 1)

    @nki.jit
    def migrated(data, idx):
        ids = nl.ndarray((idx.shape[0], 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        t = nl.ndarray((idx.shape[0], data.shape[2]), data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=data.ap(pattern=pattern, offset=offset, vector_offset=ids,
                                         indirect_dim=dim))
        out = nl.ndarray(t.shape, data.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(run(migrated, data, idx), want)


@nki.jit
def scatter_skipping(values, idx, base):
    # out = base; out[idx[p], :] = values[p, :], indices outside the rows skipped.
    n, d = values.shape
    out = nl.ndarray(base.shape, nl.float32, buffer=nl.shared_hbm)
    b = nl.ndarray(base.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=base)
    nisa.dma_copy(dst=out, src=b)
    ids = nl.ndarray((n, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    v = nl.ndarray((n, d), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=values)
    nisa.dma_copy(dst=out.ap([[d, n], [1, d]], offset=0, vector_offset=ids, indirect_dim=0),
                  src=v, oob_mode=nisa.oob_mode.skip)
    return out


def test_oob_mode_skip_moves_nothing_for_an_index_outside_the_dim():
    base = np.full((6, 3), -1.0, np.float32)
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([[2], [6], [-1], [0]], np.int32)
    want = base.copy()
    want[2], want[0] = values[0], values[3]
    np.testing.assert_array_equal(run(scatter_skipping, values, idx, base), want)
    cache = np.zeros((10, 4), np.float32)
    block = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(run(block_skipping, cache, block, np.array([[10]], np.int32)),
                                  cache)
    # Inside the dim but running past the tensor's end: out of bound too (oob_mode.error stops
    # the kernel there), so the transfer is skipped; index 7 is the last whole block.
    np.testing.assert_array_equal(run(block_skipping, cache, block, np.array([[8]], np.int32)),
                                  cache)
    want = cache.copy()
    want[7:10] = block
    np.testing.assert_array_equal(run(block_skipping, cache, block, np.array([[7]], np.int32)),
                                  want)


def flat_windows(oob_mode):
    """out_flat[idx[p]:idx[p] + 3] = values[p, :] over a 1-D tensor of 10 elements: indices 8
    and 9 name elements of the tensor, but their window would run past its end."""
    @nki.jit
    def k(values, idx, base):
        n = idx.shape[0]
        out = nl.ndarray(base.shape, nl.float32, buffer=nl.shared_hbm)
        b = nl.ndarray((1, base.shape[0]), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=base.reshape((1, base.shape[0])))
        nisa.dma_copy(dst=out.reshape((1, base.shape[0])), src=b)
        ids = nl.ndarray((n, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        v = nl.ndarray((n, 3), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=v, src=values)
        nisa.dma_copy(dst=out.ap([[1, n], [1, 3]], offset=0, vector_offset=ids, indirect_dim=0),
                      src=v, oob_mode=oob_mode)
        return out
    return k


def test_oob_mode_skip_skips_each_partition_whose_access_runs_past_the_tensor():
    base = np.full(10, -1.0, np.float32)
    values = np.arange(15, dtype=np.float32).reshape(5, 3)
    idx = np.array([[0], [8], [7], [9], [10]], np.int32)
    want = base.copy()
    want[0:3], want[7:10] = values[0], values[2]
    np.testing.assert_array_equal(run(flat_windows(nisa.oob_mode.skip), values, idx, base), want)
    with pytest.raises(Exception, match="index 8 at partition 1 .*outside \\[0, 8\\)"):
        run(flat_windows(nisa.oob_mode.error), values, idx, base)


@nki.jit
def select_plane(table, which):
    # out = table[which[0, 0], :, :], the plane chosen when the kernel runs.
    w = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=w, src=which)
    t = nl.ndarray((table.shape[1], table.shape[2]), table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=table.select(0, w))
    out = nl.ndarray(t.shape, table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_select_with_a_tile_index_picks_the_plane_at_run_time():
    table = np.arange(5 * 4 * 3, dtype=np.float32).reshape(5, 4, 3)
    for w in (0, 4):
        np.testing.assert_array_equal(run(select_plane, table, np.array([[w]], np.int32)),
                                      table[w])
    with pytest.raises(Exception, match="index 5 at partition 0 .*outside \\[0, 5\\)"):
        run(select_plane, table, np.array([[5]], np.int32))
