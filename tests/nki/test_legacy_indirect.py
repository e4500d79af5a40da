"""Indirect DMA of the legacy neuronxcc.nki API: an HBM tensor indexed on one dim by a tile of
runtime values (``data[idx_tile, i_f]``), gathered by nl.load and scattered by nl.store, with
the rules the DMA engines apply (indices in SBUF, 32-bit, one per partition; every index inside
the indexed dim, checked when the transfer runs) and the NKI 0.6 spelling in the migration
report. The kernels are this project's own; NumPy indexing is the reference (a DMA moves bits:
results are exact)."""

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def gather_listed_rows(data, idx):
    """out[k] = data[idx[k]]: the indices loaded from HBM into an SBUF index tile."""
    out = nl.ndarray((idx.shape[0], data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(idx.shape[0])[:, None]
    i_f = nl.arange(data.shape[1])[None, :]
    idx_tile = nl.load(idx[i_p, 0])
    rows = nl.load(data[idx_tile[i_p, 0], i_f])
    nl.store(out[i_p, i_f], value=rows)
    return out


@nki.jit
def every_third_row(data, n_out):
    """out[b, k] = data[b, 3 * k] for k < n_out, in tiles of 128 partitions: the index tile is
    computed on chip (iota). The last tile is partial: its partitions past n_out hold indices
    past the table, and the mask keeps them from being read."""
    b_count, n_rows, width = data.shape
    out = nl.ndarray((b_count, n_out, width), dtype=data.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(b_count):
        for t in nl.affine_range((n_out + 127) // 128):
            i_p = nl.arange(128)[:, None]
            i_f = nl.arange(width)[None, :]
            pos = t * 128 + i_p
            src = nisa.iota(3 * pos, dtype=nl.int32)
            keep = pos < n_out
            rows = nl.load(data[b, src, i_f], mask=keep)
            nl.store(out[b, pos, i_f], value=rows, mask=keep)
    return out


@nki.jit
def scatter_rows(values, idx):
    """out[idx[k]] = values[k] over a zeroed table twice the size."""
    out = nl.ndarray((2 * values.shape[0], values.shape[1]), dtype=values.dtype,
                     buffer=nl.shared_hbm)
    i_p = nl.arange(values.shape[0])[:, None]
    i_z = nl.arange(2 * values.shape[0])[:, None]
    i_f = nl.arange(values.shape[1])[None, :]
    nl.store(out[i_z, i_f], value=nl.zeros((2 * values.shape[0], values.shape[1]),
                                           dtype=values.dtype))
    idx_tile = nl.load(idx[i_p, 0])
    nl.store(out[idx_tile, i_f], value=nl.load(values[i_p, i_f]))
    return out


@nki.jit
def gather_into_float32(data, idx):
    """A gather that converts dtype on the way (fp16 rows into an fp32 tile), via nisa.dma_copy."""
    out = nl.ndarray((idx.shape[0], data.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(idx.shape[0])[:, None]
    i_f = nl.arange(data.shape[1])[None, :]
    idx_tile = nl.load(idx[i_p, 0])
    rows = nl.ndarray((idx.shape[0], data.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=data[idx_tile, i_f])
    nl.store(out[i_p, i_f], value=rows)
    return out


def test_gather_of_rows_named_by_an_index_tile_loaded_from_hbm():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((50, 24), dtype=np.float32)
    idx = rng.integers(0, 50, size=(40, 1)).astype(np.int32)
    np.testing.assert_array_equal(nki.simulate_kernel(gather_listed_rows, data, idx),
                                  data[idx[:, 0]])
    # The index tile's load (40 x 4 bytes), then 40 rows of 24 fp32 in and out: the bytes the
    # indices name, not the table the indexed view spans.
    assert gather_listed_rows.last_run.dma_bytes == 40 * 4 + 2 * 40 * 24 * 4
    report = gather_listed_rows.migration_report()
    gather = [r for r in report if r[2].startswith("nl.load(t[<index tile>")]
    assert len(gather) == 1
    file, line, _, spelling = gather[0]
    assert file == __file__ and "rows = nl.load(data[idx_tile" in open(file).readlines()[line - 1]
    assert "nisa.dma_copy(src=<tensor>.ap(pattern=[[24, 40], [1, 24]], offset=0, " \
           "vector_offset=<index tile>, indirect_dim=0)" in spelling


def test_gather_with_on_chip_indices_and_a_mask_over_the_partitions():
    rng = np.random.default_rng(5)
    data = rng.standard_normal((2, 600, 16), dtype=np.float32)
    n_out = 200  # the second tile keeps 72 of its 128 partitions (indices 384..597)
    got = nki.simulate_kernel(every_third_row, data, n_out)
    want = data[:, 3 * np.arange(n_out)]
    np.testing.assert_array_equal(got, want)


def test_scatter_writes_each_partition_to_its_row():
    rng = np.random.default_rng(11)
    values = rng.standard_normal((64, 8), dtype=np.float32)
    idx = rng.permutation(128)[:64].reshape(64, 1).astype(np.int32)
    want = np.zeros((128, 8), np.float32)
    want[idx[:, 0]] = values
    np.testing.assert_array_equal(nki.simulate_kernel(scatter_rows, values, idx), want)
    constructs = {c for _, _, c, _ in scatter_rows.migration_report()}
    assert "nl.store(t[<index tile>, ...], value) (indirect DMA scatter)" in constructs


def test_gather_converts_dtype_through_dma_copy():
    rng = np.random.default_rng(13)
    data = rng.standard_normal((20, 12), dtype=np.float32).astype(np.float16)
    idx = np.array([[19], [0], [7], [7]], np.int32)
    got = nki.simulate_kernel(gather_into_float32, data, idx)
    np.testing.assert_array_equal(got, data[idx[:, 0]].astype(np.float32))


def test_an_index_outside_the_table_is_an_error_naming_it():
    data = np.zeros((50, 24), np.float32)
    idx = np.zeros((40, 1), np.int32)
    idx[7, 0] = 50
    with pytest.raises(ValueError, match=r"index 50 at partition 7 of the index tile is outside "
                                         r"\[0, 50\) of the source's indexed dim"):
        nki.simulate_kernel(gather_listed_rows, data, idx)
    idx[7, 0] = -1
    with pytest.raises(ValueError, match=r"index -1 at partition 7"):
        nki.simulate_kernel(gather_listed_rows, data, idx)


@nki.jit
def float_indices(data, idx):
    i_p = nl.arange(idx.shape[0])[:, None]
    i_f = nl.arange(data.shape[1])[None, :]
    out = nl.ndarray((idx.shape[0], data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
    nl.store(out[i_p, i_f], value=nl.load(data[nl.load(idx[i_p, 0]), i_f]))
    return out


@nki.jit
def two_indexed_dims(data, idx):
    i_p = nl.arange(idx.shape[0])[:, None]
    t = nl.load(idx[i_p, 0])
    return nl.load(data[t, t])


@nki.jit
def indexed_on_chip(data, idx):
    i_p = nl.arange(idx.shape[0])[:, None]
    i_f = nl.arange(data.shape[1])[None, :]
    tile = nl.load(data[i_p, i_f])
    return tile[nl.load(idx[i_p, 0]), i_f]


@nki.jit
def grid_on_the_partition(data, idx):
    i_p = nl.arange(idx.shape[0])[:, None]
    t = nl.load(idx[i_p, 0])
    return nl.load(data[t, i_p])


@nki.jit
def wide_index_tile(data, idx):
    i_p, i_f = nl.mgrid[0:idx.shape[0], 0:idx.shape[1]]
    i_g = nl.arange(data.shape[1])[None, :]
    return nl.load(data[nl.load(idx[i_p, i_f]), i_g])


@pytest.mark.parametrize("kernel, idx, message", [
    (float_indices, np.zeros((4, 1), np.float32),
     "indexed by a float32 tile: indices of an indirect DMA are 32-bit integers"),
    (two_indexed_dims, np.zeros((4, 1), np.int32), "are all indexed by tiles"),
    (indexed_on_chip, np.zeros((4, 1), np.int32), "an on-chip tile indexed by a tile of runtime"),
    (grid_on_the_partition, np.zeros((4, 1), np.int32),
     "the index tile gives the transfer's partition dim"),
    (wide_index_tile, np.zeros((4, 2), np.int32), "one index per partition, a \\[P, 1\\] tile"),
])
def test_indirect_rules_are_refused_by_name(kernel, idx, message):
    with pytest.raises(nki.NkiError, match=message):
        nki.simulate_kernel(kernel, np.zeros((16, 8), np.float32), idx)
