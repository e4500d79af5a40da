"""FP8 double-row matmul (nc_matmul perf_mode=double_row; the legacy API's
perf_mode='double_row_gen3'), as AWS's Trainium2 architecture guide defines it: stationary
[K, 2, M] and moving [K, 2, N] in FP8, the size-2 most major free dim being the two halves of a
contraction of 2K, into [M, N], in the time of a BF16 matmul of contraction K; NeuronCore-v3 or
newer, not with transpose mode or column tiling. The kernels are this project's own; inputs
are small integers (exact in float8_e4m3, exact products and sums in FP32), so the NumPy
reference is exact."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def _double_row(target="trn2", dtype=nl.float8_e4m3, pair=2, transpose=False):
    @nki.jit(platform_target=target)
    def kernel(st, mv):
        k, _, m = st.shape
        n = mv.shape[2]
        out = nl.ndarray((m, n), nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((k, pair, m), dtype, buffer=nl.sbuf)
        b = nl.ndarray((k, pair, n), dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=st[:, 0:pair, :])
        nisa.dma_copy(dst=b, src=mv[:, 0:pair, :])
        acc = nl.ndarray((m, n), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, a, b, is_transpose=transpose,
                       perf_mode=nisa.matmul_perf_mode.double_row)
        nl.store(out, nl.copy(acc))
        return out

    return kernel


@nki.jit(platform_target="trn2")
def single_row_bf16(st, mv):
    out = nl.ndarray((st.shape[1], mv.shape[1]), nl.float32, buffer=nl.shared_hbm)
    a = nl.load(st, dtype=nl.bfloat16)
    b = nl.load(mv, dtype=nl.bfloat16)
    acc = nl.ndarray((st.shape[1], mv.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, a, b)
    nl.store(out, nl.copy(acc))
    return out


def _inputs(k=128, m=64, n=256, seed=0):
    rng = np.random.default_rng(seed)
    st = rng.integers(-8, 9, (k, 2, m)).astype(np.float32)
    mv = rng.integers(-8, 9, (k, 2, n)).astype(np.float32)
    return st, mv


def test_double_row_contracts_over_both_halves_in_one_rows_time():
    st, mv = _inputs()
    kernel = _double_row()
    got = nki.simulate(kernel)(st, mv)
    want = np.einsum("krm,krn->mn", st.astype(np.float64), mv.astype(np.float64))
    np.testing.assert_array_equal(np.asarray(got), want.astype(np.float32))
    run = kernel.last_run
    assert run.matmul_flops == 2 * (2 * 128) * 64 * 256
    # The same Tensor engine time as a BF16 matmul of contraction 128 (the guide's statement).
    nki.simulate(single_row_bf16)(st[:, 0, :], mv[:, 0, :])
    assert run.busy_ns["tensor"] == single_row_bf16.last_run.busy_ns["tensor"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(target="trn1"), "double_row needs NeuronCore-v3 or newer"),
    (dict(dtype=nl.bfloat16), "multiplies FP8 .* inputs; stationary is bfloat16"),
    (dict(pair=1), r"takes stationary as \[K, 2, M\]"),
    (dict(transpose=True), "cannot be combined with transpose mode"),
])
def test_double_row_rules_are_refused_by_name(kwargs, message):
    st, mv = _inputs(m=32, n=64)
    with pytest.raises(nki.NkiError, match=message):
        nki.simulate(_double_row(**kwargs))(st, mv)


def test_legacy_string_mode_and_column_broadcast():
    import neuronxcc.nki as lnki
    import neuronxcc.nki.isa as lisa
    import neuronxcc.nki.language as lnl

    @lnki.jit(platform_target="trn2")
    def scaled_double_row(st, mv, scale):
        k, _, m = st.shape
        n = mv.shape[2]
        out = lnl.ndarray((m, n), lnl.float32, buffer=lnl.shared_hbm)
        i_k, i_r, i_m = lnl.mgrid[0:k, 0:2, 0:m]
        a = lnl.load(st[i_k, i_r, i_m], dtype=lnl.float8_e4m3)
        j_k, j_r, j_n = lnl.mgrid[0:k, 0:2, 0:n]
        b = lnl.load(mv[j_k, j_r, j_n], dtype=lnl.float8_e4m3)
        acc = lnl.zeros((m, n), lnl.float32, buffer=lnl.psum)
        acc += lisa.nc_matmul(a, b, perf_mode="double_row_gen3")
        # A [P, 1] scale multiplies every column (the legacy compiler's broadcast).
        res = lisa.tensor_tensor(lnl.copy(acc), lnl.load(scale), lnl.multiply)
        lnl.store(out, value=res)
        return out

    st, mv = _inputs(m=32, n=128, seed=3)
    scale = np.arange(1, 33, dtype=np.float32).reshape(32, 1)
    got = lnki.simulate_kernel(scaled_double_row, st, mv, scale)
    want = np.einsum("krm,krn->mn", st.astype(np.float64), mv.astype(np.float64)) * scale
    np.testing.assert_array_equal(got, want.astype(np.float32))
    constructs = {c for _, _, c, _ in scaled_double_row.migration_report()}
    assert {"nisa.nc_matmul(perf_mode='double_row_gen3')",
            "nisa.tensor_tensor(data2=<a [P, 1] tile>) broadcast along the free dims"} <= constructs
