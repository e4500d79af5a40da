"""NKI 0.6 names beyond the basics: nl.ds, access patterns (.ap), NkiTensor's view methods,
nki.typing, nl.NKIObject, num_programs(axes=), every nisa call's name= and depends_on, and the
Vector / GpSimd instructions (scans, reductions through the engines' accumulators, statistics,
top-8 search, selects), each against NumPy on the same inputs."""

import dataclasses

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt
from nki.typing import tensor

U32 = np.finfo(np.float32).eps / 2


def run(kernel, *args):
    return nki.simulate(kernel)(*args)


def test_ds_and_access_patterns():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[nl.ds(0, 128), nl.ds(0, 256)])
        # Every 4th element of each partition through an explicit access pattern.
        strided = t.ap(pattern=[[256, 128], [4, 64]], offset=1)
        o = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=strided)
        nl.store(out, o)
        return out

    a = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)
    np.testing.assert_array_equal(run(k, a), a[:, 1::4])


def test_ap_refuses_a_wrong_partition_stride_and_runtime_offsets():
    @nki.jit
    def k(a):
        t = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf)
        t.ap(pattern=[[64, 128], [1, 64]])
        return a

    with pytest.raises(nki.NkiError, match="partition dim; its stride must be the storage's free size 256"):
        run(k, np.zeros((1, 1), np.float32))

    @nki.jit
    def k2(a):
        t = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf)
        idx = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        t.ap(pattern=[[256, 128], [1, 64]], scalar_offset=idx)
        return a

    with pytest.raises(nki.NkiError, match="runtime offsets"):
        run(k2, np.zeros((1, 1), np.float32))


def test_tensor_view_methods():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 6, 4), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)  # (128, 24)
        assert t.get_pattern() == [[24, 128], [1, 24]]
        assert t.is_contiguous() and not t.is_indirect()
        v = t.reshape_dim(1, (4, 6)).permute((0, 2, 1))  # (128, 6, 4)
        assert v.shape == (128, 6, 4) and not v.is_contiguous()
        r = t.rearrange(("p", ("h", "w")), ("p", "w", "h"), {"h": 4})
        assert r.shape == v.shape and r.strides == v.strides
        e = t.expand_dim(1)
        assert e.shape == (128, 1, 24) and e.squeeze_dim(1).shape == (128, 24)
        assert t.reshape_dim(1, (4, 6)).flatten_dims(1, 2).shape == (128, 24)
        assert t.slice(1, 2, 10, 2).shape == (128, 4)
        assert t.reshape_dim(1, (4, 6)).select(1, 3).shape == (128, 6)
        assert t.size == 128 * 24 and t.ndim == 2
        o = nl.ndarray((128, 6, 4), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=v)
        nl.store(out, o)
        return out

    a = np.arange(128 * 24, dtype=np.float32).reshape(128, 24)
    np.testing.assert_array_equal(run(k, a), a.reshape(128, 4, 6).transpose(0, 2, 1))


def test_view_reinterprets_bytes():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), nl.uint16, buffer=nl.shared_hbm)
        t = nl.load(a)  # float32 (128, 32)
        nl.store(out, t.view(nl.uint16))
        return out

    a = np.random.default_rng(0).standard_normal((128, 32), dtype=np.float32)
    np.testing.assert_array_equal(run(k, a), a.view(np.uint16))


def test_broadcast_to_and_expand_dims():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)  # (1, 64)
        nl.store(out, nl.broadcast_to(t, (128, 64)))
        return out

    a = np.arange(64, dtype=np.float32).reshape(1, 64)
    np.testing.assert_array_equal(run(k, a), np.broadcast_to(a, (128, 64)))


def test_typing_annotations_are_checked():
    @nki.jit
    def k(x: nt.tensor[128, 64], y: tensor):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(x), nl.load(y)))
        return out

    x = np.ones((128, 64), np.float32)
    np.testing.assert_array_equal(run(k, x, x), 2 * x)
    with pytest.raises(nki.NkiError, match=r"parameter 'x' is annotated nki.typing.tensor\[\[128, 64\]\] but got shape \(64, 64\)"):
        run(k, np.ones((64, 64), np.float32), np.ones((64, 64), np.float32))


def test_nkiobject_classes_are_dataclasses():
    class Tiling(nl.NKIObject):
        rows: int
        cols: int = 64

    @nki.jit
    def k(a):
        cfg = Tiling(rows=128)
        out = nl.ndarray((cfg.rows, cfg.cols), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a[0:cfg.rows, 0:cfg.cols]))
        return out

    @dataclasses.dataclass(frozen=True)
    class Frozen(nl.NKIObject):
        eps: float = 1e-6

    assert Tiling(rows=1) == Tiling(1, 64) and Tiling(1).cols == 64
    assert Frozen().eps == 1e-6 and Frozen(0.5) == Frozen(eps=0.5)

    # A field given no value and no default is None until the object sets it (AWS's MoE
    # kernels' DimensionSizes derive such fields in a method; its moe_cte Configs reads unset
    # clamp limits as None).
    class Dims(nl.NKIObject):
        n: int
        half: int

        def derive(self):
            self.half = self.n // 2

    d = Dims(n=6)
    assert d.half is None
    d.derive()
    assert d.half == 3
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(run(k, a), a)


def test_num_programs_axes_and_program_id():
    @nki.jit
    def k(a):
        out = nl.ndarray((2, 3), nl.float32, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        t = nl.full((1, 1), float(nl.num_programs(axes=(0, 1)) * 10 + i * 3 + j), nl.float32)
        nl.store(out[i:i + 1, j:j + 1], t)
        return out

    out = run(k[2, 3], np.zeros((1,), np.float32))
    np.testing.assert_array_equal(out, 60 + np.arange(6, dtype=np.float32).reshape(2, 3))


def test_name_keyword_and_depends_on():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        i1 = nisa.dma_copy(dst=t, src=a, name="load")
        u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        i2 = nisa.memset(dst=u, value=1.0, name="ones")
        i3 = nisa.tensor_tensor(dst=u, data1=t, data2=u, op=nl.add, name="sum")
        i3.depends_on(i1, i2)
        nisa.dma_copy(dst=out, src=u, name="store")
        return out

    a = np.ones((128, 64), np.float32)
    np.testing.assert_array_equal(run(k, a), 2 * a)


def test_tensor_tensor_scan_is_a_first_order_recurrence():
    @nki.jit
    def k(a, b, init):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        x, y, s0 = nl.load(a), nl.load(b), nl.load(init)
        d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=d, data0=x, data1=y, initial=s0, op0=nl.multiply,
                                op1=nl.add)
        nl.store(out, d)
        return out

    rng = np.random.default_rng(2)
    a = rng.uniform(0.5, 1.0, (128, 40)).astype(np.float32)
    b = rng.standard_normal((128, 40), dtype=np.float32)
    init = rng.standard_normal((128, 1), dtype=np.float32)
    ref = np.empty_like(a)
    s = init[:, 0].copy()
    for i in range(a.shape[1]):
        s = (a[:, i] * s + b[:, i]).astype(np.float32)  # FP32 each step, as the engine
        ref[:, i] = s
    np.testing.assert_array_equal(run(k, a, b, init), ref)


def test_scalar_tensor_tensor_and_tensor_scalar_reduce_with_accumulators():
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        sums = nl.ndarray((128, 2), nl.float32, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=d, data=x, op0=nl.multiply, operand0=2.0, op1=nl.subtract,
                                  operand1=y)
        nl.store(out, d)
        r = nl.ndarray((128, 2), nl.float32, buffer=nl.sbuf)
        e = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        # Two tiles summed through the Vector engine's accumulators: reset, then keep reducing.
        nisa.tensor_scalar_reduce(dst=e, data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add,
                                  reduce_res=None, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.tensor_scalar_reduce(dst=e, data=y, op0=nl.add, operand0=0.0, reduce_op=nl.add,
                                  reduce_res=r[:, 0:1], reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.tensor_scalar_reduce(dst=e, data=x, op0=nl.multiply, operand0=1.0,
                                  reduce_op=nl.max, reduce_res=r[:, 1:2], reduce_res_negate=True)
        nl.store(sums, r)
        return out, sums

    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 32), dtype=np.float32)
    b = rng.standard_normal((128, 32), dtype=np.float32)
    out, sums = run(k, a, b)
    np.testing.assert_array_equal(out, a * np.float32(2) - b)
    total = (a + np.float32(1)).astype(np.float64).sum(1) + b.astype(np.float64).sum(1)
    bound = 64 * U32 * (np.abs(a + 1).sum(1) + np.abs(b).sum(1))
    assert np.all(np.abs(sums[:, 0] - total) <= bound)
    np.testing.assert_array_equal(sums[:, 1], -a.max(1))


def test_reciprocal_predicated_copy_affine_select_partition_reduce():
    @nki.jit
    def k(a, mask):
        o1 = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        o3 = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        o4 = nl.ndarray((1, a.shape[1]), nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        r = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=r, data=x)
        nl.store(o1, r)
        m = nl.load(mask)
        c = nl.zeros(a.shape, nl.float32)
        nisa.tensor_copy_predicated(dst=c, src=x, predicate=m)
        nl.store(o2, c)
        s = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        # Causal mask: keep x[p, j] where p - j >= 0.
        nisa.affine_select(dst=s, pattern=[[-1, a.shape[1]]], channel_multiplier=1,
                           on_true_tile=x, on_false_value=-9984.0, cmp_op=nl.greater_equal)
        nl.store(o3, s)
        p = nl.ndarray((1, a.shape[1]), nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(dst=p, op=nl.maximum, data=x)
        nl.store(o4, p)
        return o1, o2, o3, o4

    rng = np.random.default_rng(4)
    a = rng.uniform(0.5, 2.0, (128, 128)).astype(np.float32)
    mask = (rng.random((128, 128)) > 0.5).astype(np.uint8)
    o1, o2, o3, o4 = run(k, a, mask)
    np.testing.assert_array_equal(o1, np.float32(1) / a)
    np.testing.assert_array_equal(o2, np.where(mask != 0, a, 0))
    p, j = np.indices(a.shape)
    np.testing.assert_array_equal(o3, np.where(p - j >= 0, a, np.float32(-9984.0)))
    np.testing.assert_array_equal(o4, a.max(0, keepdims=True))


def test_bn_stats_and_bn_aggr_give_mean_and_variance():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 2), nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)  # (128, 1024): two bn_stats tiles of 512
        st = nl.ndarray((128, 12), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=st[:, 0:6], data=x[:, 0:512])
        nisa.bn_stats(dst=st[:, 6:12], data=x[:, 512:1024])
        mv = nl.ndarray((128, 2), nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=st)
        nl.store(out, mv)
        return out

    rng = np.random.default_rng(5)
    a = (rng.standard_normal((128, 1024)) * 3 + 1).astype(np.float32)
    mv = run(k, a)
    a64 = a.astype(np.float64)
    # Sums of 256 FP32 terms and a few combination steps: |err| <= ~300 u times the magnitudes.
    assert np.all(np.abs(mv[:, 0] - a64.mean(1)) <= 300 * U32 * np.abs(a64).mean(1))
    assert np.all(np.abs(mv[:, 1] - a64.var(1)) <= 600 * U32 * (a64 ** 2).mean(1))


def test_max8_find_index8_match_replace8():
    @nki.jit
    def k(a):
        top = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        idx = nl.ndarray((128, 8), nl.uint32, buffer=nl.shared_hbm)
        rep = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.max8(dst=t, src=x)
        nl.store(top, t)
        i = nl.ndarray((128, 8), nl.uint32, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=i, data=x, vals=t)
        nl.store(idx, i)
        r = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.nc_match_replace8(dst=r, data=x, vals=t, imm=-1e9)
        nl.store(rep, r)
        return top, idx, rep

    rng = np.random.default_rng(6)
    a = rng.permutation(128 * 100).astype(np.float32).reshape(128, 100)
    top, idx, rep = run(k, a)
    order = np.argsort(-a, axis=1)[:, :8]
    np.testing.assert_array_equal(top, np.take_along_axis(a, order, 1))
    np.testing.assert_array_equal(idx, order.astype(np.uint32))
    expect = a.copy()
    np.put_along_axis(expect, order, np.float32(-1e9), 1)
    np.testing.assert_array_equal(rep, expect)


def test_dma_transpose_and_shared_constant():
    table = np.arange(64, dtype=np.float32).reshape(1, 64)

    @nki.jit(platform_target="trn2")
    def k(a):
        out = nl.ndarray((64, 128), nl.bfloat16, buffer=nl.shared_hbm)
        plus = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((64, 128), nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=a)
        nl.store(out, t)
        c = nl.shared_constant(table)
        nl.store(plus, nl.add(nl.load(a, dtype=nl.float32), nl.load(c)))
        return out, plus

    import torch

    a = torch.arange(128 * 64, dtype=torch.float32).reshape(128, 64).to(torch.bfloat16)
    out, plus = run(k, a)
    assert torch.equal(out, a.T)
    assert torch.equal(plus, a.float() + torch.from_numpy(table))


@pytest.mark.parametrize("call", [
    lambda: nisa.dropout(None, None, 0.5),
    lambda: nki.collectives.all_gather_v(None, None, None, None, has_rdispls=True),
])
def test_refused_names_say_why(call):
    @nki.jit
    def k(a):
        call()
        return a

    with pytest.raises(nki.NkiError, match="not (supported|modelled)"):
        run(k, np.zeros((1, 1), np.float32))
