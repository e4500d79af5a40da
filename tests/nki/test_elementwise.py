"""Every elementwise operation of nki.language against NumPy on the same FP32 inputs, and the
remaining small names (loops, creation, buffer queries, target queries). The engines compute in
FP32: an operation that libm or NumPy computes to within an ulp matches to k ulps for its k FP32
steps (k <= 8 here), relative to the larger of the result and its terms (the inputs are O(1), so
a composite like silu_dx, s + x s (1 - s), has O(1) terms even where it cancels to near 0)."""

import math

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

U32 = np.finfo(np.float32).eps / 2
K_ULPS = 8


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _phi(x):
    return np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.ravel()]).reshape(x.shape)


UNARY = [
    (nl.exp, np.exp), (nl.log, np.log), (nl.sqrt, np.sqrt), (nl.rsqrt, lambda x: 1 / np.sqrt(x)),
    (nl.reciprocal, lambda x: 1 / x), (nl.tanh, np.tanh), (nl.sigmoid, _sigmoid),
    (nl.relu, lambda x: np.maximum(x, 0)), (nl.gelu, lambda x: x * _phi(x)),
    (nl.gelu_apprx_tanh, lambda x: 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))),
    (nl.gelu_apprx_sigmoid, lambda x: x * _sigmoid(1.702 * x)),
    (nl.gelu_apprx_sigmoid_dx, lambda x: _sigmoid(1.702 * x) + 1.702 * x * _sigmoid(1.702 * x) * (1 - _sigmoid(1.702 * x))),
    (nl.gelu_dx, lambda x: _phi(x) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)),
    (nl.silu, lambda x: x * _sigmoid(x)), (nl.silu_dx, lambda x: _sigmoid(x) * (1 + x * (1 - _sigmoid(x)))),
    (nl.softplus, lambda x: np.log1p(np.exp(x))), (nl.mish, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    (nl.erf, lambda x: np.vectorize(math.erf)(x)), (nl.erf_dx, lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x)),
    (nl.sin, np.sin), (nl.cos, np.cos), (nl.tan, np.tan), (nl.arctan, np.arctan),
    (nl.abs, np.abs), (nl.square, np.square), (nl.sign, np.sign), (nl.negative, np.negative),
    (nl.ceil, np.ceil), (nl.floor, np.floor), (nl.trunc, np.trunc),
    (nl.logical_not, lambda x: (x == 0).astype(np.float64)),
]

BINARY = [
    (nl.add, np.add), (nl.subtract, np.subtract), (nl.multiply, np.multiply),
    (nl.divide, np.divide), (nl.maximum, np.maximum), (nl.minimum, np.minimum),
    (nl.power, np.power), (nl.fmod, np.fmod), (nl.mod, np.mod),
    (nl.equal, np.equal), (nl.not_equal, np.not_equal), (nl.greater, np.greater),
    (nl.greater_equal, np.greater_equal), (nl.less, np.less), (nl.less_equal, np.less_equal),
    (nl.logical_and, np.logical_and), (nl.logical_or, np.logical_or),
    (nl.logical_xor, np.logical_xor),
    (nl.abs_max, lambda a, b: np.maximum(np.abs(a), np.abs(b))),
    (nl.abs_min, lambda a, b: np.minimum(np.abs(a), np.abs(b))),
]

INTEGER = [
    (nl.bitwise_and, np.bitwise_and), (nl.bitwise_or, np.bitwise_or),
    (nl.bitwise_xor, np.bitwise_xor), (nl.left_shift, np.left_shift),
    (nl.right_shift, np.right_shift),
]


def _close(out, ref):
    ref = np.asarray(ref, np.float64)
    assert np.all(np.abs(out - ref) <= K_ULPS * U32 * np.maximum(np.abs(ref), 1.0))


@pytest.mark.parametrize("op,ref", UNARY, ids=lambda v: getattr(v, "name", ""))
def test_unary(op, ref):
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, op(nl.load(a)))
        return out

    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 1.4, (128, 16)).astype(np.float32)
    x[:, ::2] *= -1 if op.name not in ("log", "sqrt", "rsqrt") else 1
    _close(nki.simulate(k)(x), ref(x.astype(np.float64)))


@pytest.mark.parametrize("op,ref", BINARY, ids=lambda v: getattr(v, "name", ""))
def test_binary(op, ref):
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, op(nl.load(a), nl.load(b)))
        return out

    rng = np.random.default_rng(1)
    x = rng.integers(-4, 5, (128, 16)).astype(np.float32) + 0.5
    y = rng.integers(1, 4, (128, 16)).astype(np.float32) * np.where(rng.random((128, 16)) > 0.5, 1, -1).astype(np.float32)
    y[:, 0] = x[:, 0]  # some equal pairs
    if op is nl.power:
        x = np.abs(x)  # real powers of positive bases
    _close(nki.simulate(k)(x, y), ref(x.astype(np.float64), y.astype(np.float64)))


@pytest.mark.parametrize("op,ref", INTEGER, ids=lambda v: getattr(v, "name", ""))
def test_integer_ops(op, ref):
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, nl.int32, buffer=nl.shared_hbm)
        nl.store(out, op(nl.load(a), nl.load(b)))
        return out

    rng = np.random.default_rng(2)
    x = rng.integers(0, 1 << 12, (128, 8)).astype(np.int32)
    y = rng.integers(0, 8, (128, 8)).astype(np.int32)
    np.testing.assert_array_equal(nki.simulate(k)(x, y), ref(x, y))


def test_invert_and_reductions():
    @nki.jit
    def k(a, f):
        inv = nl.ndarray(a.shape, nl.uint8, buffer=nl.shared_hbm)
        red = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
        nl.store(inv, nl.invert(nl.load(a)))
        x = nl.load(f)
        r = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r[:, 0:1], src=nl.min(x, axis=1, keepdims=True))
        nisa.tensor_copy(dst=r[:, 1:2], src=nl.prod(x, axis=1, keepdims=True))
        nisa.tensor_copy(dst=r[:, 2:3], src=nl.all(x, axis=1, keepdims=True))
        nisa.tensor_copy(dst=r[:, 3:4], src=nl.mean(x, axis=1, keepdims=True))
        nl.store(red, r)
        return inv, red

    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (128, 8)).astype(np.uint8)
    f = rng.integers(1, 3, (128, 8)).astype(np.float32)
    inv, red = nki.simulate(k)(a, f)
    np.testing.assert_array_equal(inv, ~a)
    np.testing.assert_array_equal(red[:, 0], f.min(1))
    np.testing.assert_array_equal(red[:, 1], f.prod(1))
    np.testing.assert_array_equal(red[:, 2], np.ones(128))
    np.testing.assert_array_equal(red[:, 3], f.mean(1))


def test_loops_creation_and_queries():
    @nki.jit(platform_target="trn2")
    def k(a):
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        assert nisa.get_nc_version() == nisa.nc_version.gen3 and nisa.get_nc_sub_version() == 0
        assert nl.is_hbm(a) and nl.is_on_chip(nl.sbuf) and nl.is_psum(nl.psum)
        assert nl.is_sbuf(nl.MemoryRegion.sbuf) and not nl.is_sbuf(a)
        assert nl.tile_size.sbuf_fmax * 4 == nl.tile_size.total_available_sbuf_size == 229376
        acc = nl.zeros_like(nl.empty_like(nl.ones_like(nl.full_like(nl.load(a), 3.0))))

        def body(i):
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=float(i))

        nl.fori_loop(0, 4, body)  # + 0 + 1 + 2 + 3
        for i in nl.dynamic_range(2):
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=10.0)
        for i in nl.affine_range(1):
            for j in nl.sequential_range(1):
                for m in nl.static_range(1):
                    acc[...] = nl.add(acc, 0.5)
        e = nl.expand_dims(acc, 1)
        assert e.shape == (128, 1, 8)
        nl.store(out, acc)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(np.zeros((128, 8), np.float32)), 26.5)


def test_activation_reduce_nc_transpose_and_exponential():
    @nki.jit(platform_target="trn3")
    def k(a):
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((64, 128), nl.float32, buffer=nl.shared_hbm)
        e = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        sq = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=sq, op=nl.square, data=x, reduce_op=nl.add, reduce_res=r)
        nl.store(s, r)
        tp = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=tp, data=x)
        nl.store(t, nl.copy(tp))
        m = nl.max(x, axis=1, keepdims=True)
        ex = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        tot = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=ex, src=x, max_value=m, reduce_res=tot)
        nl.store(e, ex)
        return s, t, e

    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 64), dtype=np.float32)
    s, t, e = nki.simulate(k)(a)
    a64 = a.astype(np.float64)
    assert np.all(np.abs(s[:, 0] - (a64 ** 2).sum(1)) <= 65 * U32 * (a64 ** 2).sum(1))
    np.testing.assert_array_equal(t, a.T)
    _close(e, np.exp(a64 - a64.max(1, keepdims=True)))


def test_remaining_language_names():
    @nki.jit(platform_target="trn2")
    def k(a, b):
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        st = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
        assert nl.program_ndim() == 1
        assert (nl.tile_size.psum_num_banks, nl.tile_size.sbuf_fmax_bytes,
                nl.tile_size.sbuf_size_bytes) == (8, 229376, 229376 * 128)
        with nl.no_reorder():
            at = nl.load_transpose2d(a)  # (128, 128) transposed
            prod = nl.matmul(at, nl.load(b), transpose_x=True)  # a @ b
            ident = nl.shared_identity_matrix(128, dtype=nl.float32)
            same = nl.copy(nl.transpose(nl.matmul(ident, nl.copy(prod), transpose_x=True)))
        nl.store(out, nl.copy(nl.transpose(same)))
        x = nl.load(a[:, 0:4])
        s = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s[:, 0:1], src=nl.var(x, axis=1, keepdims=True))
        ones = nl.ones((128, 1), nl.float32)
        nisa.tensor_copy(dst=s[:, 1:4], src=ones.broadcast(1, 3))
        nl.store(st, s)
        return out, st

    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (128, 128)).astype(np.float32)
    b = rng.integers(-3, 4, (128, 128)).astype(np.float32)
    out, st = nki.simulate(k)(a, b)
    np.testing.assert_array_equal(out, a @ b)  # small integers: exact in FP32
    np.testing.assert_array_equal(st[:, 0], a[:, 0:4].var(1))
    np.testing.assert_array_equal(st[:, 1:], 1.0)
