"""Static views of an access placed at run time (NKI 0.6's NkiTensor.select / slice /
__getitem__ on an indirect view): the dims outside the indirection slice and select as on any
view, the runtime index stays attached and is checked when the kernel runs; the dim that takes
part in the indirection, and a second runtime index, are refused as AWS refuses them."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def run(kernel, *args):
    return nki.simulate(kernel)(*args)


def _to_sbuf(x, dtype=nl.int32):
    t = nl.ndarray(x.shape, dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _out(access, dtype):
    # The access moved to SBUF, then to a fresh HBM output.
    t = nl.ndarray(access.shape if len(access.shape) > 1 else (access.shape[0], 1), dtype,
                   buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=access)
    out = nl.ndarray(t.shape, dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def plane_window(table, which):
    # table[which, 1:3, ::2]: a plane chosen at run time, then a static slice of its dims.
    return _out(table.select(0, _to_sbuf(which))[1:3, ::2], table.dtype)


@nki.jit
def plane_row(table, which):
    # table[which, :, 4] through select / slice on the selected view, dims counted after the
    # runtime select dropped dim 0.
    return _out(table.select(0, _to_sbuf(which)).slice(0, 1, 4).select(1, 4), table.dtype)


@nki.jit
def gathered_columns(table, idx):
    # out[p, :] = table[idx[p], 2, :] and out2[p] = table[idx[p], 3, 5]: a vector_select, then
    # a static select / index of the other dims (the partition dim, the indices', stays).
    v = table.vector_select(0, _to_sbuf(idx))
    return _out(v.select(1, 2), table.dtype), _out(v[:, 3, 5], table.dtype)


@nki.jit
def ds_rows_column(table, at):
    # table[at:at + 3, 1]: a dynamic slice of dim 0 by a register, then a static index of dim 1.
    reg = nisa.register_alloc(_to_sbuf(at))
    return _out(table[nl.ds(reg, 3), :][:, 1:2], table.dtype)


@nki.jit
def block_first_row(cache, start):
    # cache[start, :] through .ap(scalar_offset=) of a 3-row block narrowed to its first row:
    # the narrower access may start at any row (the whole block could not start past row 7).
    d = cache.shape[1]
    blk = cache.ap([[d, 3], [1, d]], offset=0, scalar_offset=_to_sbuf(start), indirect_dim=0)
    return _out(blk[0:1, :], cache.dtype)


def test_a_static_slice_of_a_plane_selected_at_run_time():
    table = np.arange(5 * 4 * 6, dtype=np.float32).reshape(5, 4, 6)
    for w in (0, 3, 4):
        np.testing.assert_array_equal(run(plane_window, table, np.array([[w]], np.int32)),
                                      table[w, 1:3, ::2])
        np.testing.assert_array_equal(run(plane_row, table, np.array([[w]], np.int32)),
                                      table[w, 1:4, 4][:, None])
    # The index is still checked when the kernel runs, against the selected dim.
    with pytest.raises(Exception, match="index 5 at partition 0 .*outside \\[0, 5\\)"):
        run(plane_window, table, np.array([[5]], np.int32))


def test_a_static_select_of_a_vector_select():
    table = np.arange(9 * 4 * 6, dtype=np.float32).reshape(9, 4, 6)
    idx = np.array([[8], [0], [3], [3]], np.int32)
    rows, elems = run(gathered_columns, table, idx)
    np.testing.assert_array_equal(rows, table[idx[:, 0], 2, :])
    np.testing.assert_array_equal(elems, table[idx[:, 0], 3, 5][:, None])
    with pytest.raises(Exception, match="index 9 at partition 1 .*outside \\[0, 9\\)"):
        run(gathered_columns, table, np.array([[8], [9], [0], [0]], np.int32))


def test_a_static_slice_beside_a_dynamic_slice():
    table = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    for at in (0, 7):
        np.testing.assert_array_equal(run(ds_rows_column, table, np.array([[at]], np.int32)),
                                      table[at:at + 3, 1:2])
    # nl.ds(i, 3) of 10 rows takes i in [0, 7].
    with pytest.raises(Exception, match="index 8 at partition 0 .*outside \\[0, 8\\)"):
        run(ds_rows_column, table, np.array([[8]], np.int32))


def test_a_narrower_view_takes_the_indices_its_own_access_stays_inside():
    cache = np.arange(10 * 4, dtype=np.float32).reshape(10, 4)
    np.testing.assert_array_equal(run(block_first_row, cache, np.array([[9]], np.int32)),
                                  cache[9:10])
    with pytest.raises(Exception, match="index 10 at partition 0 .*outside \\[0, 10\\)"):
        run(block_first_row, cache, np.array([[10]], np.int32))


def _refused(what):
    @nki.jit
    def k(table, idx):
        ids = _to_sbuf(idx)
        if what == "vector dim":
            v = table.vector_select(0, ids)[0:1]
        elif what == "vector select":
            v = table.vector_select(0, ids).select(0, 1)
        elif what == "ds dim":
            v = table[nl.ds(nisa.register_alloc(ids[0:1, :]), 2), :][0:1, :]
        elif what == "chained":
            v = table.select(0, ids[0:1, :]).select(0, ids[1:2, :])
        else:
            v = table.select(0, ids[0:1, :])[nl.ds(nisa.register_alloc(ids[1:2, :]), 1), :]
        return _out(v, table.dtype)
    return k


@pytest.mark.parametrize("what, message", [
    ("vector dim", "cannot be further sliced or selected"),
    ("vector select", "cannot be further sliced or selected"),
    ("ds dim", "cannot be further sliced or selected"),
    ("chained", "only one dynamic select per tensor"),
    ("chained register", "only one dynamic select per tensor"),
])
def test_the_indirect_dim_and_a_second_runtime_index_are_refused(what, message):
    with pytest.raises(nki.NkiError, match=message):
        run(_refused(what), np.zeros((6, 4, 3), np.float32), np.zeros((2, 1), np.int32))


@nki.jit
def on_chip_window(x, which):
    # An SBUF tile's plane chosen at run time (a free-dim runtime offset), then sliced.
    xs = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    v = xs.select(1, _to_sbuf(which))[:, 2:7:2].select(1, 1)
    t = nl.ndarray((x.shape[0], 1), x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=v)
    out = nl.ndarray(t.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_static_view_of_an_on_chip_runtime_select():
    x = np.arange(4 * 3 * 8, dtype=np.float32).reshape(4, 3, 8)
    for w in (0, 2):
        np.testing.assert_array_equal(run(on_chip_window, x, np.array([[w]], np.int32)),
                                      x[:, w, 4:5])


@pytest.mark.parametrize("method, message", [
    (lambda v: v.permute((0, 2, 1)), "not modelled here"),
    (lambda v: v.view(nl.int32), "cannot be re-indirected"),
])
def test_other_view_methods_of_an_access_placed_at_run_time_are_refused_by_name(method,
                                                                                 message):
    @nki.jit
    def k(table, idx):
        return _out(method(table.vector_select(0, _to_sbuf(idx))), table.dtype)

    with pytest.raises(nki.NkiError, match=message):
        run(k, np.zeros((6, 4, 3), np.float32), np.zeros((2, 1), np.int32))
