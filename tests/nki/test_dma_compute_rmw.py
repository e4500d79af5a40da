"""nisa.dma_compute's read-modify-write through an HBM access placed by a vector_offset (AWS's
NKI 0.6 stub: a gather, dst(SBUF) = dst(SBUF) + src(HBM)[indices], and a scatter,
dst(HBM)[indices] = dst(HBM)[indices] + src(SBUF)), checked against NumPy with the indices read
and bounds-checked when the kernel runs."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def run(kernel, *args):
    return nki.simulate(kernel)(*args)


def topk_sum(dtype=nl.float32, oob_mode=nisa.oob_mode.error):
    """out[t, :] = sum over k of table[idx[t, k], :], as AWS's topk_reduce sums its top-k rows:
    the first row by dma_copy, the next ones added by dma_compute's gather form."""
    @nki.jit
    def k(table, idx):
        t, kk = idx.shape
        d = table.shape[1]
        ids = nl.ndarray((t, kk), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        acc = nl.ndarray((t, d), dtype, buffer=nl.sbuf)
        for j in range(kk):
            rows = table.ap(pattern=[[d, t], [1, d]], offset=0,
                            vector_offset=ids.ap(pattern=[[kk, t], [1, 1]], offset=j),
                            indirect_dim=0)
            if j == 0:
                nisa.dma_copy(dst=acc[:, :], src=rows)
            else:
                nisa.dma_compute(dst=acc[:, :], srcs=[rows, acc[:, :]], reduce_op=nl.add,
                                 unique_indices=True, oob_mode=oob_mode)
        out = nl.ndarray((t, d), dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out
    return k


@nki.jit
def scatter_add(table, idx, values):
    # out = table; out[idx[p], :] += values[p, :]
    n, d = values.shape
    ids = nl.ndarray((n, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    v = nl.ndarray((n, d), values.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=values)
    out = nl.ndarray(table.shape, table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=table)
    rows = out.ap(pattern=[[d, n], [1, d]], offset=0, vector_offset=ids, indirect_dim=0)
    nisa.dma_compute(dst=rows, srcs=[rows, v], reduce_op=nl.add, scales=[1.0, 1.0])
    return out


def test_gather_form_sums_the_rows_its_indices_name():
    rng = np.random.default_rng(7)
    table = rng.standard_normal((50, 24)).astype(np.float32)
    idx = rng.integers(0, 50, size=(32, 4)).astype(np.int32)
    expect = table[idx[:, 0]]
    for j in range(1, 4):
        expect = expect + table[idx[:, j]]  # FP32, in the kernel's order
    np.testing.assert_array_equal(run(topk_sum(), table, idx), expect)
    # Another index tile through the same specialisation: read when the kernel runs.
    idx2 = rng.integers(0, 50, size=(32, 4)).astype(np.int32)
    expect2 = table[idx2[:, 0]]
    for j in range(1, 4):
        expect2 = expect2 + table[idx2[:, j]]
    np.testing.assert_array_equal(run(topk_sum(), table, idx2), expect2)


def test_gather_form_rounds_once_per_step_to_the_dst_dtype():
    # The DMA engines sum in FP32 and convert to dst's dtype: each step is
    # fp16(fp32(dst) + fp32(row)).
    rng = np.random.default_rng(8)
    table = rng.standard_normal((40, 16)).astype(np.float16)
    idx = rng.integers(0, 40, size=(16, 3)).astype(np.int32)
    expect = table[idx[:, 0]]
    for j in range(1, 3):
        expect = (expect.astype(np.float32) + table[idx[:, j]].astype(np.float32)).astype(
            np.float16)
    np.testing.assert_array_equal(run(topk_sum(nl.float16), table, idx), expect)


def test_scatter_form_adds_to_the_rows_its_indices_name():
    rng = np.random.default_rng(9)
    table = rng.standard_normal((64, 20)).astype(np.float32)
    idx = rng.permutation(64)[:32].astype(np.int32).reshape(32, 1)
    values = rng.standard_normal((32, 20)).astype(np.float32)
    expect = table.copy()
    expect[idx[:, 0]] += values
    np.testing.assert_array_equal(run(scatter_add, table, idx, values), expect)


def test_scatter_form_with_a_repeated_index_is_an_error_when_it_runs():
    table = np.zeros((16, 8), np.float32)
    idx = np.array([[3], [5], [3], [1]], np.int32)
    with pytest.raises(nki.NkiError, match="index 3 appears more than once"):
        run(scatter_add, table, idx, np.ones((4, 8), np.float32))


def test_an_index_outside_the_table_is_an_error_or_skipped_with_oob_mode_skip():
    table = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    idx = np.array([[1, 2], [3, 10], [4, 5], [6, 7]], np.int32)
    with pytest.raises(nki.NkiError, match="index 10 at partition 1"):
        run(topk_sum(), table, idx)
    # oob_mode.skip: partition 1's addition is skipped, its row keeps the first gather's.
    got = run(topk_sum(oob_mode=nisa.oob_mode.skip), table, idx)
    expect = table[idx[:, 0]] + table[np.minimum(idx[:, 1], 9)]
    expect[1] = table[3]
    np.testing.assert_array_equal(got, expect)


def _refusing(body):
    @nki.jit
    def k(table, idx):
        ids = nl.ndarray((8, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        acc = nl.ndarray((8, 4), nl.float32, buffer=nl.sbuf)
        other = nl.ndarray((8, 4), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        nisa.memset(dst=other, value=0.0)
        rows = table.ap(pattern=[[4, 8], [1, 4]], offset=0, vector_offset=ids, indirect_dim=0)
        body(table, ids, rows, acc, other)
        return table
    return k


@pytest.mark.parametrize("body, message", [
    (lambda t, i, r, acc, o: nisa.dma_compute(acc, [r, acc, o], nl.add),
     "exactly 2 sources"),
    (lambda t, i, r, acc, o: nisa.dma_compute(acc, [r, acc], nl.add, unique_indices=False),
     "unique_indices=False"),
    (lambda t, i, r, acc, o: nisa.dma_compute(acc, [r, o], nl.add),
     "must be dst itself"),
    (lambda t, i, r, acc, o: nisa.dma_compute(r, [r, r], nl.add),
     "one SBUF tile"),
    (lambda t, i, r, acc, o: nisa.dma_compute(r, [t.ap([[4, 8], [1, 4]], offset=4,
                                                       vector_offset=i, indirect_dim=0), acc],
                                              nl.add),
     "that same access"),
    (lambda t, i, r, acc, o: nisa.dma_compute(
        acc[0:1, :], [t.ap([[4, 1], [1, 4]], offset=0, scalar_offset=i[0:1, :],
                           indirect_dim=0), acc[0:1, :]], nl.add),
     "scalar_offset"),
    (lambda t, i, r, acc, o: nisa.dma_compute(acc, [r, acc], nl.add, scales=[1.0, 2.0]),
     "scales must be one 1.0"),
])
def test_forms_aws_does_not_document_are_refused_by_name(body, message):
    with pytest.raises(nki.NkiError, match=message):
        run(_refusing(body), np.zeros((16, 4), np.float32), np.zeros((8, 1), np.int32))


def _one_transfer(op):
    @nki.jit
    def k(table, idx):
        n, d = idx.shape[0], table.shape[1]
        ids = nl.ndarray((n, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        acc = nl.ndarray((n, d), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        rows = table.ap(pattern=[[d, n], [1, d]], offset=0, vector_offset=ids, indirect_dim=0)
        if op == "copy":
            nisa.dma_copy(dst=acc, src=rows)
        elif op == "compute":
            nisa.dma_compute(dst=acc, srcs=[rows, acc], reduce_op=nl.add)
        return table
    return k


def test_timed_as_the_indirect_dma_copy_with_two_sources_read():
    # The read-modify-write reads the indirect rows and the tile they are added to, as a
    # two-source dma_compute reads two: twice the descriptors of the indirect dma_copy that
    # moves the same rows.
    table = np.zeros((64, 256), np.float32)
    idx = np.zeros((128, 1), np.int32)

    def descriptors(op):
        return _one_transfer(op).specialize((table, idx), {}).timeline()["dma_descriptors"]

    base = descriptors(None)
    copy, compute = descriptors("copy") - base, descriptors("compute") - base
    assert copy > 0
    assert compute == 2 * copy
