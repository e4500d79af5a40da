"""Kernels written for the legacy neuronxcc.nki API run with its semantics (index grids, masks,
block dims, value-returning instructions, the baremetal / simulate_kernel / benchmark harness)
and print a migration report naming each legacy construct at its file:line with the NKI 0.6
spelling. The kernels are this project's own, in the legacy API's style."""

import inspect

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

HERE = __file__
U32 = np.finfo(np.float32).eps / 2


def _line(fn, text):
    fn = getattr(fn, "fn", fn)
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


@nki.jit
def masked_add(a, b):
    """A 129 x 513 add in 128 x 512 tiles: masks keep the edge tiles in bounds."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        for j in nl.affine_range(2):
            i_p, i_f = nl.mgrid[0:128, 0:512]
            keep = (i_p + 128 * i < a.shape[0]) & (i_f + 512 * j < a.shape[1])
            x = nl.load(a[i_p + 128 * i, i_f + 512 * j], mask=keep)
            y = nl.load(b[i_p + 128 * i, i_f + 512 * j], mask=keep)
            z = nl.add(x, y, mask=keep)
            nl.store(out[i_p + 128 * i, i_f + 512 * j], value=z, mask=keep)
    return out


def test_index_grids_and_masks(capsys):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((129, 513), dtype=np.float32)
    b = rng.standard_normal((129, 513), dtype=np.float32)
    np.testing.assert_array_equal(nki.baremetal(masked_add)(a, b), a + b)
    err = capsys.readouterr().err
    assert "NKI migration report for kernel 'masked_add'" in err
    assert f"{HERE}:{_line(masked_add, 'nl.mgrid[0:128')}: nl.mgrid -> integer slices" in err
    assert f"{HERE}:{_line(masked_add, 'x = nl.load')}: mask= -> clip the slices" in err
    assert "nki.baremetal -> call the @nki.jit kernel on NumPy arrays" in err


@nki.jit
def blocked_matmul(lhsT, rhs):
    """Hoisted loads into block-dim (par_dim) tiles; PSUM accumulation with +=."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    i_l = nl.mgrid[0:128, 0:128]
    i_r = nl.mgrid[0:128, 0:512]
    i_o = nl.mgrid[0:128, 0:512]
    for m in nl.affine_range(M // 128):
        lhs_tiles = nl.ndarray((K // 128, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // 128):
            lhs_tiles[k, i_l.p, i_l.x] = nl.load(lhsT[k * 128 + i_l.p, m * 128 + i_l.x])
        for n in nl.affine_range(N // 512):
            rhs_tiles = nl.ndarray((K // 128, nl.par_dim(128), 512), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // 128):
                rhs_tiles[k, i_r.p, i_r.x] = nl.load(rhs[k * 128 + i_r.p, n * 512 + i_r.x])
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                acc += nl.matmul(lhs_tiles[k, i_l.p, i_l.x], rhs_tiles[k, i_r.p, i_r.x],
                                 transpose_x=True)
            res = nl.copy(acc, dtype=result.dtype)
            nl.store(result[m * 128 + i_o.p, n * 512 + i_o.x], value=res)
    return result


def test_block_dims_and_psum_accumulation(capsys):
    rng = np.random.default_rng(1)
    lhsT = rng.standard_normal((256, 256), dtype=np.float32)
    rhs = rng.standard_normal((256, 512), dtype=np.float32)
    out = nki.simulate_kernel(blocked_matmul, lhsT, rhs)
    ref = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    bound = 257 * U32 * (np.abs(lhsT).T.astype(np.float64) @ np.abs(rhs))
    assert np.all(np.abs(out - ref) <= bound)
    report = blocked_matmul.migration_report()
    constructs = {c for _, _, c, _ in report}
    assert {"nl.par_dim block dims", "nl.mgrid", "nki.simulate_kernel", "neuronxcc.nki"} <= constructs
    # The loads write the block tiles directly (no copy through a fresh tile).
    spec = blocked_matmul.specialize((lhsT, rhs), {})
    assert spec.timeline()["instructions"]["vector"] == 2 + 2  # 2 PSUM zeroings + 2 PSUM copies


@nki.jit
def softmax_isa(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    neg_max = nisa.tensor_reduce(np.maximum, t, axis=(1,), negate=True, keepdims=True)
    s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
    e = nisa.activation(op=nl.exp, data=t, bias=neg_max, reduce_op=np.add, reduce_res=s)
    r = nisa.reciprocal(s)
    y = nisa.tensor_scalar(e, np.multiply, r, dtype=x.dtype)
    nl.store(out, y)
    return out


def test_value_returning_instructions_with_numpy_ops(capsys):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((128, 64), dtype=np.float32)
    out = nki.simulate_kernel(softmax_isa, x)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    ref = e / e.sum(1, keepdims=True)
    assert np.all(np.abs(out - ref) <= 80 * U32 * ref)
    err = capsys.readouterr().err
    line = _line(softmax_isa, "nisa.reciprocal")
    assert (f"{HERE}:{line}: nisa.reciprocal(...) returning its result -> "
            "nisa.reciprocal(dst=<nl.ndarray(...)>, ...)") in err


@nki.jit
def norm_and_causal(x):
    stats_out = nl.ndarray((128, 2), nl.float32, buffer=nl.shared_hbm)
    masked_out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    iota_out = nl.ndarray((128, 128), nl.int32, buffer=nl.shared_hbm)
    t = nl.load(x)
    st = nisa.bn_stats(t, dtype=nl.float32)
    mv = nisa.bn_aggr(st)
    nl.store(stats_out, mv)
    i_q = nl.arange(128)[:, None]
    i_k = nl.arange(128)[None, :]
    causal = nisa.affine_select(pred=(i_q - i_k >= 0), on_true_tile=t, on_false_value=-9984.0)
    nl.store(masked_out, causal)
    nl.store(iota_out, nisa.iota(i_k * 2 + i_q, dtype=nl.int32))
    return stats_out, masked_out, iota_out


def test_statistics_affine_select_and_iota():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 128), dtype=np.float32)
    stats, causal, iota = nki.simulate_kernel(norm_and_causal, x)
    x64 = x.astype(np.float64)
    assert np.all(np.abs(stats[:, 0] - x64.mean(1)) <= 200 * U32 * np.abs(x64).mean(1))
    assert np.all(np.abs(stats[:, 1] - x64.var(1)) <= 400 * U32 * (x64 ** 2).mean(1))
    q, k = np.indices((128, 128))
    np.testing.assert_array_equal(causal, np.where(q >= k, x, np.float32(-9984.0)))
    np.testing.assert_array_equal(iota, 2 * k + q)


@nki.jit(mode="simulation")
def write_into_output(a, out):
    """The oldest style: the kernel writes an output argument and returns nothing."""
    i_p, i_f = nl.mgrid[0:128, 0:64]
    nl.store(out[i_p, i_f], value=nl.multiply(nl.load(a[i_p, i_f]), 2.0))


def test_output_arguments_and_benchmark():
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    out = np.zeros_like(a)
    bench = nki.benchmark(warmup=2, iters=5)(write_into_output)
    assert bench(a, out) is None
    np.testing.assert_array_equal(out, 2 * a)
    us = bench.benchmark_result.nc_latency.get_latency_percentile(50)
    assert us == pytest.approx(bench.last_run.makespan_ns / 1e3)
    constructs = {c for _, _, c, _ in bench.migration_report()}
    assert "nki.jit(mode='simulation')" in constructs and "nki.benchmark" in constructs


def test_legacy_errors_name_the_gap():
    @nki.jit
    def two_axis_mask(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:128]
        nl.store(out[i_p, i_f], value=nl.load(a[i_p, i_f]), mask=(i_p - i_f >= 0))
        return out

    with pytest.raises(nki.NkiError, match="mask= over several grid axes"):
        nki.simulate_kernel(two_axis_mask, np.zeros((128, 128), np.float32))


@nki.jit
def halves_kernel(a, out):
    i = nl.program_id(0)
    flat = a.reshape(shape=(a.shape[0] * a.shape[1],))  # the legacy keyword spelling
    t = nl.load(a[i * 128:(i + 1) * 128, :])
    nl.store(out[i * 128:(i + 1) * 128, :], nl.maximum(t, nl.fp32.min))
    assert flat.shape == (a.shape[0] * a.shape[1],)


def test_harness_takes_a_grid_and_host_helpers():
    # AWS's nki-samples tests call simulate_kernel(kernel[grid], ...) and make inputs with
    # nl.static_cast; their kernels use nl.fp32.min, nl.finfo and reshape(shape=...).
    a = np.arange(256 * 4, dtype=np.float32).reshape(256, 4)
    out = np.zeros_like(a)
    nki.simulate_kernel(halves_kernel[2], a, out)
    np.testing.assert_array_equal(out, a)
    assert nl.static_cast(np.array([1.5, 2.25]), np.float16).dtype == np.float16
    assert nl.finfo(nl.float32).min == nl.fp32.min == np.finfo(np.float32).min


@nki.jit
def negated_row_max(a):
    out = nl.ndarray((a.shape[0], 1), a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.tensor_reduce(np.max, data=nl.load(a), axis=(1,), negate=True))
    return out


def test_numpy_reduction_as_op():
    a = np.random.default_rng(0).random((128, 64), dtype=np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(negated_row_max, a)[:, 0], -a.max(axis=1))
    assert any(c == "np.max as op=" for _, _, c, _ in negated_row_max.migration_report())


def _accumulate_into(acc_of_head, x, h):
    """Takes a block-dim view acc[h] (one block dim left), as AWS's backward kernels pass."""
    for j in nl.affine_range(acc_of_head.shape[0]):
        for k in nl.affine_range(3):
            t = nl.load(x[h, k, 0:128, 0:64])
            # k <= j compares unrolled loop variables: a Python bool; False turns both off.
            scaled = nl.multiply(t, float(j + 1), mask=(k <= j))
            acc_of_head[j, :, :] = nl.loop_reduce(scaled, op=np.add, loop_indices=(k,),
                                                  mask=(k <= j))


@nki.jit
def block_views_and_loop_reduce(x):
    """acc has two block dims; helpers get acc[h]; nl.loop_reduce accumulates under bool masks."""
    H = x.shape[0]
    out = nl.ndarray((H, 2, 128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((H, 2, nl.par_dim(128), 64), dtype=nl.float32)
    for h in nl.affine_range(H):
        _accumulate_into(acc[h], x, h)
    whole = acc[:, 1]  # a slice on a block dim: a view over the same tiles
    assert whole.shape == (H, 128, 64)
    for h in nl.affine_range(H):
        nl.store(out[h, 0], value=acc[h, 0, :, :])
        nl.store(out[h, 1], value=whole[h])
    return out


def test_block_dim_views_bool_masks_and_loop_reduce(capsys):
    x = np.random.default_rng(5).standard_normal((2, 3, 128, 64), dtype=np.float32)
    got = nki.simulate_kernel(block_views_and_loop_reduce, x)
    want = np.zeros((2, 2, 128, 64), np.float32)
    for h in range(2):
        for j in range(2):
            for k in range(j + 1):  # the iterations whose mask is True, in loop order
                want[h, j] = x[h, k] * np.float32(j + 1) + want[h, j]
    np.testing.assert_array_equal(got, want)
    constructs = {c for _, _, c, _ in block_views_and_loop_reduce.migration_report()}
    assert "nl.loop_reduce" in constructs and "nl.par_dim block dims" in constructs


def test_block_dim_errors_name_the_problem():
    @nki.jit
    def out_of_range(a):
        acc = nl.zeros((2, nl.par_dim(128), 8), dtype=nl.float32)
        acc[2, :, :] = nl.load(a)

    @nki.jit
    def write_several_blocks(a):
        acc = nl.zeros((2, nl.par_dim(128), 8), dtype=nl.float32)
        acc[0:2] = nl.load(a)

    @nki.jit
    def read_masked_off(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        for i in nl.affine_range(2):
            y = nl.multiply(t, 2.0, mask=(i > 0))
            nl.store(out, value=nl.add(y, 1.0))
        return out

    a = np.zeros((128, 8), np.float32)
    with pytest.raises(nki.NkiError, match="block index 2 is out of range for block dim 0"):
        nki.simulate_kernel(out_of_range, a)
    with pytest.raises(nki.NkiError, match="one tile of a par_dim tensor at a time"):
        nki.simulate_kernel(write_several_blocks, a)
    with pytest.raises(nki.NkiError, match="turned off by mask=False"):
        nki.simulate_kernel(read_masked_off, a)


@nki.jit
def assign_into_zeroed_blocks(a):
    """blk[i] = <fresh tile>: the block's tile is allocated (and zeroed) at this assignment,
    after the value's producer ran; the zeroing must stay before the write."""
    out = nl.ndarray((2,) + a.shape, a.dtype, buffer=nl.shared_hbm)
    blk = nl.zeros((2, nl.par_dim(a.shape[0]), a.shape[1]), dtype=a.dtype)
    for i in nl.affine_range(2):
        blk[i, :, :] = nl.multiply(nl.load(a), float(i + 2))
    for i in nl.affine_range(2):
        nl.store(out[i], value=blk[i, :, :])
    return out


def test_assignment_is_not_folded_past_an_access_of_its_target():
    a = np.random.default_rng(6).random((128, 32), dtype=np.float32)
    got = nki.simulate_kernel(assign_into_zeroed_blocks, a)
    np.testing.assert_array_equal(got, np.stack([a * np.float32(2), a * np.float32(3)]))


@nki.jit
def psum_operands_staged(a):
    """Legacy kernels pass PSUM results straight to nc_matmul, affine_select and nl.store."""
    out_mm = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    out_sel = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    t_t = nisa.nc_transpose(t)  # a PSUM tile
    nl.store(out_mm, value=nisa.nc_matmul(t_t, t))  # stationary from PSUM; the result in PSUM
    i_q, i_k = nl.mgrid[0:128, 0:128]
    nl.store(out_sel, value=nisa.affine_select(i_q - i_k >= 0, t_t, -1.0))
    return out_mm, out_sel


@nki.jit
def iota_over_inner_axes(a):
    """nisa.iota of an expression over the last two axes of a 4-D grid, used with a full tile."""
    out = nl.ndarray((128, 4, 3, 3), nl.float32, buffer=nl.shared_hbm)
    g = nl.mgrid[0:128, 0:4, 0:3, 0:3]
    lin = nisa.iota(3 * g.y + g.z, dtype=nl.float32)
    assert lin.shape == (1, 1, 3, 3)
    nl.store(out, value=nl.where(nl.load(a) > 0.5, lin, -1.0))
    return out


@nki.jit
def runtime_gather(a, idx):
    out = nl.ndarray((128, 8), a.dtype, buffer=nl.shared_hbm)
    rows = nl.load(idx)
    i_f = nl.arange(8)[None, :]
    nl.store(out, value=nl.load(a[rows, i_f]))
    return out


def test_psum_operands_iota_positions_and_runtime_gathers():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 128), dtype=np.float32)
    mm, sel = nki.simulate_kernel(psum_operands_staged, a)
    a64 = a.astype(np.float64)
    # stationary = a^T (K = 128 rows of a^T's partitions), moving = a: out = (a^T)^T a = a a.
    want = a64 @ a64
    assert np.all(np.abs(mm - want) <= 128 * U32 * 2 * (np.abs(a64) @ np.abs(a64)))
    q, k = np.indices((128, 128))
    np.testing.assert_array_equal(sel, np.where(q >= k, a.T, np.float32(-1.0)))
    constructs = {c for _, _, c, _ in psum_operands_staged.migration_report()}
    assert {"nisa.nc_matmul(stationary=<a PSUM tile>)", "nisa.affine_select(on_true_tile=<a PSUM "
            "tile>)", "nl.store(value=<a PSUM tile>)"} <= constructs

    x = rng.random((128, 4, 3, 3), dtype=np.float32)
    lin = (3 * np.arange(3)[:, None] + np.arange(3)[None, :]).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(iota_over_inner_axes, x),
                                  np.where(x > 0.5, lin, np.float32(-1.0)))

    # A tile of runtime indices addresses the load (an indirect DMA gather; more in
    # test_legacy_indirect.py).
    table = rng.standard_normal((256, 8), dtype=np.float32)
    idx = rng.integers(0, 256, size=(128, 1)).astype(np.int32)
    np.testing.assert_array_equal(nki.simulate_kernel(runtime_gather, table, idx),
                                  table[idx[:, 0]])


@nki.jit
def column_totals(a):
    """One number per head into out[h] (a 0-d view of HBM) from a 1-element tile."""
    out = nl.ndarray((a.shape[0],), nl.float32, buffer=nl.shared_hbm)
    for h in nl.affine_range(a.shape[0]):
        rows = nl.sum(nl.load(a[h]), axis=1)
        nl.store(out[h], value=nisa.tensor_partition_reduce(np.add, rows))
    return out


def test_store_of_one_element_into_a_scalar_view():
    a = np.arange(2 * 128 * 4, dtype=np.float32).reshape(2, 128, 4)  # integer sums: exact
    np.testing.assert_array_equal(nki.simulate_kernel(column_totals, a), a.sum(axis=(1, 2)))


@nki.jit
def psum_operands(x, w):
    """Value-returning results in PSUM used where engines read only SBUF (the legacy compiler
    placed them), a block tensor indexed by a leading block index, and masks decided at trace
    time."""
    out = nl.ndarray((2, 128, 128), nl.float32, buffer=nl.shared_hbm)
    blocks = nl.ndarray((2, 2, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        row = blocks[i]  # (2, par_dim(128), 128): a view of blocks' tiles
        for j in nl.affine_range(2):
            row[j, :, :] = nl.load(x[i * 2 + j])
    wt = nl.load(w)
    for i in nl.affine_range(2):
        keep = i >= 0  # a Python bool: True keeps everything
        t = nisa.nc_transpose(blocks[i, 0, :, :], mask=keep)  # in PSUM
        prod = nisa.nc_matmul(t, wt, mask=keep)  # stationary from PSUM
        i_q = nl.arange(128)[:, None]
        i_k = nl.arange(128)[None, :]
        causal = nisa.affine_select(pred=(i_q - i_k >= 0), on_true_tile=prod,  # from PSUM
                                    on_false_value=0.0)
        nl.store(out[i], nl.add(causal, blocks[i, 1, :, :]))
    return out


def test_psum_operands_block_views_and_trace_time_masks(capsys):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 128, 128), dtype=np.float32)
    w = rng.standard_normal((128, 128), dtype=np.float32)
    out = nki.simulate_kernel(psum_operands, x, w)
    q, k = np.indices((128, 128))
    for i in range(2):
        prod = x[2 * i].astype(np.float64) @ w.astype(np.float64)  # (x^T)^T @ w
        bound = 129 * U32 * (np.abs(x[2 * i]).astype(np.float64) @ np.abs(w)) + U32 * np.abs(x[2 * i + 1])
        want = np.where(q >= k, prod, 0.0) + x[2 * i + 1]
        assert np.all(np.abs(out[i] - want) <= bound)
    constructs = {c for _, _, c, _ in psum_operands.migration_report()}
    assert {"nisa.nc_matmul(stationary=<a PSUM tile>)",
            "nisa.affine_select(on_true_tile=<a PSUM tile>)"} <= constructs


@nki.jit
def false_mask(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.copy(nl.load(x), mask=(1 < 0)))
    return out


def test_reading_the_result_of_a_mask_false_at_trace_time_is_refused():
    # mask=False turns the copy off; the store reads what it did not write.
    with pytest.raises(nki.NkiError, match="turned off by mask=False"):
        nki.simulate_kernel(false_mask, np.ones((128, 4), np.float32))


@nki.jit
def column_tiles(x):
    out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)  # (128, 4)
    col = t[:, 2]  # a (128, 1) tile, in the legacy API as in NKI 0.6
    nl.store(out, nl.add(col[:, 0], t[:, 3]))
    return out


def test_an_integer_free_index_keeps_a_tile_two_dimensional():
    x = np.arange(512, dtype=np.float32).reshape(128, 4)
    out = nki.simulate_kernel(column_tiles, x)
    np.testing.assert_array_equal(out, x[:, 2:3] + x[:, 3:4])
    # NKI 0.6 keeps an on-chip tile 2-D the same way: nothing to migrate.
    constructs = {c for _, _, c, _ in column_tiles.migration_report()}
    assert not any("(P, 1)" in c for c in constructs)


@nki.jit
def loop_reduced(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((2, nl.par_dim(128), 64), dtype=nl.float32)
    for j in nl.affine_range(2):
        for k in nl.affine_range(3):
            acc[j, :, :] = nl.loop_reduce(nl.load(x[k]), op=np.add, loop_indices=(k,))
    nl.store(out, nl.add(acc[0, :, :], acc[1, :, :]))
    return out


def test_loop_reduce_accumulates_into_its_destination():
    x = np.arange(3 * 128 * 64, dtype=np.float32).reshape(3, 128, 64) / 7
    out = nki.simulate_kernel(loop_reduced, x)
    s = (x[0] + x[1]) + x[2]  # the FP32 order of the accumulation
    np.testing.assert_array_equal(out, s + s)
    constructs = {c for _, _, c, _ in loop_reduced.migration_report()}
    assert "nl.loop_reduce" in constructs


@nki.jit
def store_psum(x, w):
    out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((2, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(2):
        acc[i, :, :] += nisa.nc_matmul(nl.load(x[i]), nl.load(w))
    nl.store(out, value=acc[1, :, :])  # a PSUM tile stored: through SBUF
    return out


def test_a_psum_tile_is_stored_through_sbuf():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 128, 128), dtype=np.float32)
    w = rng.standard_normal((128, 128), dtype=np.float32)
    out = nki.simulate_kernel(store_psum, x, w)
    want = x[1].astype(np.float64).T @ w.astype(np.float64)
    assert np.all(np.abs(out - want) <= 129 * U32 * (np.abs(x[1]).T.astype(np.float64) @ np.abs(w)))
    constructs = {c for _, _, c, _ in store_psum.migration_report()}
    assert "nl.store(value=<a PSUM tile>)" in constructs
