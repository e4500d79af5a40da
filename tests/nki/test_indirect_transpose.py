"""AWS's indirect transpose: nisa.dma_transpose whose src is an HBM tensor's
.ap(vector_offset=<[P, 1] uint32 SBUF tile>, indirect_dim=0), rows gathered by the index tile
when the instruction runs, then permuted (NKI 0.6 stub: gathered = src[indices], dst =
gathered.T). Checked against NumPy, several index tiles through one specialisation."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def gather_transpose(table, idx):
    # dst[:, p] = table[idx[p], :]
    n, d = idx.shape[0], table.shape[1]
    ids = nl.ndarray((n, 1), nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    t = nl.ndarray((d, n), table.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=table.ap(pattern=[[d, n], [1, d]], offset=0,
                                           vector_offset=ids, indirect_dim=0), axes=(1, 0))
    out = nl.ndarray((d, n), table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def gather_blocks_transposed(cache, idx):
    # AWS's library (attention_tkg, block KV): blocks [nb, 1, bl, d] gathered by block id,
    # axes (3, 1, 2, 0): dst[j, 0, r, p] = cache[idx[p], 0, r, j].
    nb, _, bl, d = cache.shape
    n = idx.shape[0]
    ids = nl.ndarray((n, 1), nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    t = nl.ndarray((d, 1, bl, n), cache.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=cache.ap([[bl * d, n], [1, 1], [d, bl], [1, d]], offset=0,
                                           vector_offset=ids, indirect_dim=0),
                       axes=(3, 1, 2, 0), dge_mode=nisa.dge_mode.swdge)
    out = nl.ndarray((d, 1, bl, n), cache.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_rows_gathered_by_an_index_tile_then_transposed():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((40, 24)).astype(np.float16)
    for ids in (rng.integers(0, 40, 32), np.arange(32)[::-1], np.full(32, 39)):
        idx = ids.astype(np.uint32).reshape(32, 1)
        got = nki.simulate(gather_transpose)(table, idx)
        np.testing.assert_array_equal(got, table[ids].T)
    assert len(gather_transpose._cache) == 1  # the indices are data: one trace


def test_kv_blocks_gathered_by_block_id_with_the_4d_permutation():
    rng = np.random.default_rng(1)
    cache = rng.standard_normal((10, 1, 4, 16)).astype(np.float16)
    for ids in (rng.integers(0, 10, 16), np.arange(16) % 10):
        idx = ids.astype(np.uint32).reshape(16, 1)
        got = nki.simulate(gather_blocks_transposed)(cache, idx)
        np.testing.assert_array_equal(got, cache[ids].transpose(3, 1, 2, 0))
    assert len(gather_blocks_transposed._cache) == 1


def test_an_index_outside_the_table_is_an_error_when_it_runs():
    table = np.zeros((40, 24), np.float16)
    idx = np.arange(32, dtype=np.uint32).reshape(32, 1)
    idx[5] = 40
    with pytest.raises(Exception, match="index 40 at partition 5 .*outside \\[0, 40\\)"):
        nki.simulate(gather_transpose)(table, idx)


def transpose_with_index_dtype(index_dtype):
    @nki.jit
    def k(table, idx):
        ids = nl.ndarray((32, 1), index_dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        t = nl.ndarray((24, 32), table.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=table.ap([[24, 32], [1, 24]], offset=0,
                                               vector_offset=ids, indirect_dim=0))
        return t
    return k


def test_aws_rules_of_the_indirect_transpose_are_refused_by_name():
    idx = np.zeros((32, 1), np.int32)
    with pytest.raises(nki.NkiError, match="indices of an indirect transpose are uint32"):
        nki.simulate(transpose_with_index_dtype(nl.int32))(np.zeros((40, 24), np.float16), idx)
    with pytest.raises(nki.NkiError, match="moves 2-byte dtypes"):
        nki.simulate(transpose_with_index_dtype(nl.uint32))(np.zeros((40, 24), np.float32),
                                                            idx.astype(np.uint32))


@nki.jit
def plain_transpose(rows):
    n, d = rows.shape
    t = nl.ndarray((d, n), rows.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=rows, axes=(1, 0))
    out = nl.ndarray((d, n), rows.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_modelled_as_a_dma_transpose_of_the_gathered_rows():
    # Each picked row is read whole (one descriptor) and the DMA engine's transpose block
    # reorders the rows, as in nisa.dma_transpose: the same modelled time as transposing those
    # rows from a contiguous tile, not a gather into a strided view at one descriptor per element.
    table = np.zeros((256, 128), np.float16)
    idx = np.arange(128, dtype=np.uint32).reshape(128, 1)
    gathered = gather_transpose.specialize((table, idx), {}).timeline()["instruction_times_ns"]
    plain = plain_transpose.specialize((table[:128],), {}).timeline()["instruction_times_ns"]
    gather_ns = gathered[1][1] - gathered[1][0]  # after the index tile's load
    transpose_ns = plain[0][1] - plain[0][0]
    assert gather_ns == pytest.approx(transpose_ns, rel=1e-9)


def gather_transpose_columns(rows, cols, shape4=None):
    """AWS's [128, N] index tiles: flat_indices = indices.T.flatten()[:rows], gathered =
    src[flat_indices], dst = gathered transposed (2-D, or the 4-D (3, 1, 2, 0) form)."""
    @nki.jit
    def k(table, idx):
        ids = nl.ndarray((128, cols), nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        if shape4 is None:
            d = table.shape[1]
            t = nl.ndarray((d, rows), table.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=t, src=table.ap([[d, rows], [1, d]], offset=0,
                                                   vector_offset=ids, indirect_dim=0),
                               axes=(1, 0))
        else:
            _, d1, d2, d3 = table.shape
            t = nl.ndarray((d3, d1, d2, rows), table.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=t, src=table.ap([[d1 * d2 * d3, rows], [d2 * d3, d1],
                                                    [d3, d2], [1, d3]], offset=0,
                                                   vector_offset=ids, indirect_dim=0),
                               axes=(3, 1, 2, 0))
        out = nl.ndarray(t.shape, table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    return k


@pytest.mark.parametrize("rows, cols", [(256, 2), (144, 2), (384, 3)])
def test_a_128_by_n_index_tile_gathers_column_by_column(rows, cols):
    rng = np.random.default_rng(rows + cols)
    table = rng.standard_normal((300, 64)).astype(np.float16)
    kernel = gather_transpose_columns(rows, cols)
    for _ in range(2):
        idx = rng.integers(0, 300, (128, cols)).astype(np.uint32)
        flat = idx.T.flatten()[:rows]
        np.testing.assert_array_equal(nki.simulate(kernel)(table, idx), table[flat].T)
    assert len(kernel._cache) == 1


def test_a_128_by_n_index_tile_with_the_4d_permutation():
    rng = np.random.default_rng(5)
    cache = rng.standard_normal((200, 1, 4, 16)).astype(np.float16)
    idx = rng.integers(0, 200, (128, 2)).astype(np.uint32)
    flat = idx.T.flatten()[:256]
    got = nki.simulate(gather_transpose_columns(256, 2, shape4=True))(cache, idx)
    np.testing.assert_array_equal(got, cache[flat].transpose(3, 1, 2, 0))


def test_an_index_outside_the_table_in_a_later_column_is_an_error():
    table = np.zeros((300, 64), np.float16)
    idx = np.zeros((128, 2), np.uint32)
    idx[7, 1] = 300
    with pytest.raises(Exception, match="index 300 at partition 7 .*outside \\[0, 300\\)"):
        nki.simulate(gather_transpose_columns(256, 2))(table, idx)


def test_index_tiles_of_several_columns_follow_aws_rules():
    @nki.jit
    def sixty_four_partitions(table, idx):
        ids = nl.ndarray((64, 2), nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        t = nl.ndarray((64, 128), table.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=table.ap([[64, 128], [1, 64]], offset=0,
                                               vector_offset=ids, indirect_dim=0))
        return t

    @nki.jit
    def copy_gather(table, idx):
        ids = nl.ndarray((128, 2), nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        t = nl.ndarray((128, 64), table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=table.ap([[64, 128], [1, 64]], offset=0,
                                                    vector_offset=ids, indirect_dim=0))
        return t

    table = np.zeros((300, 64), np.float16)
    with pytest.raises(nki.NkiError, match="must be exactly 128"):
        nki.simulate(sixty_four_partitions)(table, np.zeros((64, 2), np.uint32))
    with pytest.raises(nki.NkiError, match="index tiles of several columns are AWS's indirect"):
        nki.simulate(copy_gather)(table, np.zeros((128, 2), np.uint32))
