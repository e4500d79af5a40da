"""NKI 0.6's shape rule for integer indices (AWS's NKI language guide, "Tensor Indexing", and
NkiTensor.__getitem__'s docstring in the 0.6 stubs): an SBUF / PSUM tensor stays at least 2-D. An
integer on its partition dim keeps that dim at size 1; an integer on a free dim drops the dim
unless that would leave only the partition dim, when the last free dim is kept at size 1
(t[:, i] of a (P, F) tile is (P, 1)). An HBM tensor drops an integer-indexed dim and stays at
least 1-D. AWS's attention_cte kernel relies on the (P, 1) tile (it slices `b[:n, qkmax_grp]`
again as `[:n, :1]`). Each view's values are checked against NumPy."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def run(kernel, *args):
    return nki.simulate(kernel)(*args)


SHAPES = {}


@nki.jit
def columns(x):
    # x: (P, F). out[:, 0] = x[:, 3] + x[:, 5] from (P, 1) tiles taken by integer indices, the
    # first sliced again as 2-D (the library's `bound0[:num_p, :1]`).
    p, f = x.shape
    t = nl.ndarray((p, f), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    a, b = t[:, 3], t.select(1, 5)
    SHAPES["2d"] = (a.shape, b.shape, a[:p, :1].shape)
    s = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=a[:p, :1], data2=b, op=nl.add)
    out = nl.ndarray((p, 1), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=s)
    return out


def test_an_integer_on_the_only_free_dim_keeps_it_at_size_one():
    x = np.random.default_rng(0).standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(run(columns, x), x[:, 3:4] + x[:, 5:6])
    assert SHAPES["2d"] == ((128, 1), (128, 1), (128, 1))


@nki.jit
def three_d(x):
    # x: (P, A, B). The language guide's cases on a 3-D SBUF tile, each copied out.
    p, a, b = x.shape
    t = nl.ndarray((p, a, b), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    views = {"row": t[:, 1], "elem": t[:, 2, 5], "corner": t[0, 0, 5], "part": t[0],
             "last": t[..., 4], "psel": t[:, 1, 2:6]}
    SHAPES["3d"] = {k: v.shape for k, v in views.items()}
    outs = []
    for k in ("row", "elem", "corner", "part", "last", "psel"):
        v = views[k]
        o = nl.ndarray(v.shape, nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray(v.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=v)
        nisa.dma_copy(dst=o, src=s)
        outs.append(o)
    return tuple(outs)


def test_integer_indices_on_a_3d_tile_follow_the_language_guide():
    x = np.random.default_rng(1).standard_normal((64, 4, 8)).astype(np.float32)
    row, elem, corner, part, last, psel = run(three_d, x)
    assert SHAPES["3d"] == {"row": (64, 8), "elem": (64, 1), "corner": (1, 1),
                            "part": (1, 4, 8), "last": (64, 4), "psel": (64, 4)}
    np.testing.assert_array_equal(row, x[:, 1])
    np.testing.assert_array_equal(elem, x[:, 2, 5:6])
    np.testing.assert_array_equal(corner, x[0:1, 0, 5:6])
    np.testing.assert_array_equal(part, x[0:1])
    np.testing.assert_array_equal(last, x[..., 4])
    np.testing.assert_array_equal(psel, x[:, 1, 2:6])


@nki.jit
def hbm_views(x):
    # x: (N, P, F) in HBM: integers drop dims, at least 1-D remains.
    n, p, f = x.shape
    SHAPES["hbm"] = (x[1].shape, x[1, :, 2].shape, x[1, 2, 3].shape)
    t = nl.ndarray((p, f), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[1])
    out = nl.ndarray((p, f), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_hbm_drops_integer_indexed_dims():
    x = np.random.default_rng(2).standard_normal((3, 32, 16)).astype(np.float32)
    np.testing.assert_array_equal(run(hbm_views, x), x[1])
    assert SHAPES["hbm"] == ((32, 16), (32,), (1,))


@nki.jit
def register_column(x, count):
    # out[:, j] = x[:, j] for j < count (a runtime value), 0 after: sb[:, i] with a register i
    # is a (P, 1) tile moved along the free dim when the copy runs.
    p, f = x.shape
    buf = nl.ndarray((p, f), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=buf, src=x)
    res = nl.ndarray((p, f), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=res, value=0.0)
    sb = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=count)
    n = nisa.register_alloc()
    nisa.register_load(n, sb)
    for i in nl.dynamic_range(n):
        col = buf[:, i]
        SHAPES["reg"] = col.shape
        c = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c, src=col)
        nisa.dma_copy(dst=res[:, i], src=c)
    out = nl.ndarray((p, f), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_a_register_index_on_the_only_free_dim_keeps_it_at_size_one():
    x = np.random.default_rng(3).standard_normal((16, 6)).astype(np.float32)
    for k in (0, 4):
        want = np.zeros_like(x)
        want[:, :k] = x[:, :k]
        np.testing.assert_array_equal(run(register_column, x, np.array([[k]], np.int32)), want)
    assert SHAPES["reg"] == (16, 1)
