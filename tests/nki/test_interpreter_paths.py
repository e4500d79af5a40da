"""The interpreter's fast paths give the values of its plain ones: instructions that stream from
their operands' memory into the destination's (no staging), scans that advance many partitions
at once, max / min folds over several lanes, and arguments that share memory (one tensor passed
twice, or views of one tensor), where nothing may be overwritten before it is read; large
instructions split over partition ranges on several threads give one thread's values bit for
bit."""

import os
import subprocess
import sys

import numpy as np
import torch

import nki
from nki import _nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def _copy(src, dst):
    nisa.dma_copy(dst=dst, src=src)


def test_a_copy_between_overlapping_arguments_reads_before_it_writes():
    # bf16 -> fp32 into the same memory: each result is wider than its source, so a copy that
    # wrote before reading would overwrite sources not yet converted.
    x = torch.empty(1, 8192)
    a = x.view(torch.bfloat16)[:, :8192]
    a.copy_(torch.randn(1, 8192, generator=torch.Generator().manual_seed(0)))
    want = a.float().clone()
    nki.simulate(_copy)(a, x)
    torch.testing.assert_close(x, want, rtol=0, atol=0)

    # Same dtype, the destination 100 elements past the source in one tensor.
    y = torch.randn(8200, generator=torch.Generator().manual_seed(1))
    want = y[0:8000].clone()
    nki.simulate(_copy)(y[0:8000], y[100:8100])
    torch.testing.assert_close(y[100:8100], want, rtol=0, atol=0)


def test_scan_in_place_over_partitions_and_blocks_of_any_size():
    # 100 partitions (not a multiple of the lanes advanced together), 131 elements (not a
    # multiple of the blocks), the result written over data0's own tile.
    @nki.jit
    def k(a, b, init):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        x, y, s0 = nl.load(a), nl.load(b), nl.load(init)
        nisa.tensor_tensor_scan(dst=x, data0=x, data1=y, initial=s0, op0=nl.multiply,
                                op1=nl.add)
        nl.store(out, x)
        return out

    rng = np.random.default_rng(4)
    a = rng.uniform(0.5, 1.0, (100, 131)).astype(np.float32)
    b = rng.standard_normal((100, 131), dtype=np.float32)
    init = rng.standard_normal((100, 1), dtype=np.float32)
    want = np.empty_like(a)
    s = init[:, 0].copy()
    for i in range(a.shape[1]):
        s = (a[:, i] * s + b[:, i]).astype(np.float32)
        want[:, i] = s
    np.testing.assert_array_equal(nki.simulate(k)(a, b, init), want)


def _fold(values, pick):
    # The engine's fold: NaN wherever an operand is NaN, else the first of equal values kept.
    acc = np.float32(-np.inf if pick is max else np.inf)
    for v in values:
        if np.isnan(acc) or np.isnan(v):
            acc = np.float32(np.nan)
        elif (acc < v) if pick is max else (v < acc):
            acc = v
    return acc


def test_max_and_min_folds_keep_nan_and_the_first_signed_zero():
    @nki.jit
    def k(a):
        hi = nl.ndarray((a.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
        lo = nl.ndarray((a.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        nl.store(hi, nl.max(x, axis=1, keepdims=True))
        nl.store(lo, nl.min(x, axis=1, keepdims=True))
        return hi, lo

    rng = np.random.default_rng(5)
    a = rng.standard_normal((8, 100)).astype(np.float32)
    a[1, 37] = np.nan                          # NaN mid-row
    a[2] = -np.abs(a[2])                       # all negative but a -0 then a +0: max is -0
    a[2, 10], a[2, 60] = -0.0, 0.0
    a[3] = np.abs(a[3])                        # all positive but a +0 then a -0: min is +0
    a[3, 5], a[3, 90] = 0.0, -0.0
    a[4] = 0.0                                 # zeros of both signs only
    a[4, ::3] = -0.0
    a[5, 99] = np.inf
    a[6, 0] = np.nan                           # NaN first
    hi, lo = nki.simulate(k)(a)
    for r in range(a.shape[0]):
        for got, pick in ((hi[r, 0], max), (lo[r, 0], min)):
            want = _fold(a[r], pick)
            assert (np.isnan(got) and np.isnan(want)) or (
                got == want and np.signbit(got) == np.signbit(want)), (r, pick, got, want)


def test_streamed_instructions_convert_broadcast_operands_and_narrow_results():
    # Per-partition scale and bias tiles, a bf16 source and a bf16 result: the operands are
    # converted and broadcast chunk by chunk, the result rounded as it is stored.
    @nki.jit
    def k(a, s, b):
        out = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
        x, sc, bi = nl.load(a), nl.load(s), nl.load(b)
        y = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.copy, data=x, bias=bi, scale=sc)
        z = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=z, data=y, op0=nl.multiply, operand0=sc, op1=nl.subtract,
                           operand1=1.5)
        nl.store(out, z)
        return out

    g = torch.Generator().manual_seed(6)
    a = torch.randn(128, 3000, generator=g).bfloat16()
    s = torch.rand(128, 1, generator=g)
    b = torch.rand(128, 1, generator=g)
    y = (a.float() * s + b).bfloat16()  # FP32 inside (exact steps), rounded to bf16 when stored
    want = (y.float() * s - 1.5).bfloat16()
    torch.testing.assert_close(nki.simulate(k)(a, s, b), want, rtol=0, atol=0)


def _windowed_kernel(m, n, taps):
    # A 1-D convolution as the library writes it: each tap's moving operand is a window into one
    # wider tile (its partition stride is the tile's width, not the window's), the stationary
    # operand a column block of a wider weight tile, the taps accumulating in one PSUM tile.
    @nki.jit
    def kern(x, w):
        out = nl.ndarray((m, n), nl.float32, buffer=nl.shared_hbm)
        xt = nl.load(x)  # [k, n + taps - 1]
        wt = nl.load(w)  # [k, taps * m + 3]
        acc = nl.ndarray((m, n), nl.float32, buffer=nl.psum)
        for t in range(taps):
            nisa.nc_matmul(dst=acc, stationary=wt[:, t * m:(t + 1) * m], moving=xt[:, t:t + n])
        res = nl.ndarray((m, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nl.store(out, res)
        return out

    return nki.simulate(kern)


def _windowed_matmuls(k, m, n, taps):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((k, n + taps - 1), dtype=np.float32)
    w = rng.standard_normal((k, taps * m + 3), dtype=np.float32)
    want = sum(w[:, t * m:(t + 1) * m].astype(np.float64).T @ x[:, t:t + n].astype(np.float64)
               for t in range(taps))
    got = _windowed_kernel(m, n, taps)(x, w)
    # FP32 products summed over taps * k terms in some order: each sum within (taps * k) units
    # of FP32 rounding of the sum of its terms' magnitudes.
    bound = np.abs(w[:, :taps * m]).reshape(k, taps, m).transpose(1, 0, 2).reshape(taps * k, m).T \
        .astype(np.float64) @ np.abs(np.concatenate([x[:, t:t + n] for t in range(taps)]))
    assert np.all(np.abs(got - want) <= taps * k * np.finfo(np.float32).eps * bound)


def test_matmuls_read_windows_of_wider_tiles_in_place():
    _windowed_matmuls(4, 1, 509, 4)      # small: the interpreter's own loop


def test_matmuls_read_windows_of_wider_tiles_through_the_lent_gemm():
    import torch_neuronx  # noqa: F401  (lends ATen's GEMM to the interpreter)
    _windowed_matmuls(128, 128, 510, 3)  # large: the lent GEMM, with row strides


def test_large_matmuls_split_their_rows_over_two_threads_bit_for_bit():
    # A product of at least 4M multiply-accumulates is two GEMMs, on the two halves of the
    # result's rows, at any thread count; with two threads the halves run on two.
    import torch_neuronx  # noqa: F401
    k, m, n, taps = 128, 128, 510, 3
    rng = np.random.default_rng(11)
    x = rng.standard_normal((k, n + taps - 1), dtype=np.float32)
    w = rng.standard_normal((k, taps * m + 3), dtype=np.float32)
    one, _ = _at_threads(1, _windowed_kernel(m, n, taps), x, w)
    many, splits = _at_threads(2, _windowed_kernel(m, n, taps), x, w)
    assert splits >= taps
    np.testing.assert_array_equal(many, one)
    want = sum(w[:, t * m:(t + 1) * m].astype(np.float64).T @ x[:, t:t + n].astype(np.float64)
               for t in range(taps))
    bound = sum(np.abs(w[:, t * m:(t + 1) * m]).astype(np.float64).T
                @ np.abs(x[:, t:t + n]).astype(np.float64) for t in range(taps))
    assert np.all(np.abs(many - want) <= taps * k * np.finfo(np.float32).eps * bound)


def test_split_matmuls_whose_operands_need_copies_match_one_thread_bit_for_bit():
    # BF16 operands, and an FP32 operand read with a stride along its free axis, are copied to
    # dense FP32 before the GEMM (a dense FP32 one is read in place); at two threads each thread
    # computing a half makes its own copies. The bits must not depend on the thread count.
    import torch_neuronx  # noqa: F401  (lends ATen's GEMM to the interpreter)
    k, m, n = 128, 128, 512  # 8M multiply-accumulates: above the split threshold

    @nki.jit
    def kern(q, kv, w, x):
        out = nl.ndarray((m, n), nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray((m, n), nl.float32, buffer=nl.shared_hbm)
        qt = nl.load(q)    # [k, m] bf16
        kt = nl.load(kv)   # [k, n] bf16
        wt = nl.load(w)    # [k, m] fp32, read in place
        xt = nl.load(x)    # [k, 2n] fp32: every second column is the moving operand
        acc = nl.ndarray((m, n), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=qt, moving=kt)
        res = nl.ndarray((m, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nl.store(out, res)
        acc2 = nl.ndarray((m, n), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc2, stationary=wt, moving=xt[:, 0:2 * n:2])
        res2 = nl.ndarray((m, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res2, src=acc2)
        nl.store(out2, res2)
        return out, out2

    g = torch.Generator().manual_seed(5)
    q = torch.randn(k, m, generator=g).bfloat16()
    kv = torch.randn(k, n, generator=g).bfloat16()
    w = torch.randn(k, m, generator=g)
    x = torch.randn(k, 2 * n, generator=g)
    run = nki.simulate(kern)
    _nki.set_interpreter_threads(1)
    try:
        one = [t.numpy() for t in run(q, kv, w, x)]
        _nki.set_interpreter_threads(2)
        splits = _nki.split_instruction_count()
        many = [t.numpy() for t in run(q, kv, w, x)]
        assert _nki.split_instruction_count() - splits >= 2
    finally:
        _nki.set_interpreter_threads(0)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)
    # Each result a sum of k FP32 products of exactly representable (BF16 / FP32) operands:
    # within k units of FP32 rounding of the sum of the terms' magnitudes.
    for got, s, mv in ((many[0], q.double().numpy(), kv.double().numpy()),
                       (many[1], w.double().numpy(), x[:, 0:2 * n:2].double().numpy())):
        want = s.T @ mv
        bound = np.abs(s).T @ np.abs(mv)
        assert np.all(np.abs(got - want) <= k * np.finfo(np.float32).eps * bound)


def test_outputs_and_tiles_are_poisoned_unless_written_whole_before_read():
    # The NaN fill of an output is skipped only where the program writes all of it before
    # reading any of it; an output written in part, or read first, still shows NaN.
    @nki.jit
    def k(x):
        whole = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)   # two stores cover it
        part = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)    # the last column is never written
        early = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)   # read before it is written
        t = nl.load(x)
        nl.store(whole[:, 0:5], t[:, 0:5])
        nl.store(whole[:, 5:8], t[:, 5:8])
        nl.store(part[:, 0:7], t[:, 0:7])
        seen = nl.load(early)
        nl.store(early, nl.add(seen, t))
        half = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        h = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)  # its right half is never written
        nisa.tensor_copy(dst=h[:, 0:4], src=t[:, 0:4])
        nl.store(half, h)
        return whole, part, early, half

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    # Run twice: the second run's tiles reuse the first's scratch memory, values and all.
    for _ in range(2):
        whole, part, early, half = nki.simulate(k)(torch.from_numpy(x))
        torch.testing.assert_close(whole, torch.from_numpy(x), rtol=0, atol=0)
        torch.testing.assert_close(part[:, :7], torch.from_numpy(x[:, :7]), rtol=0, atol=0)
        assert torch.isnan(part[:, 7]).all()
        assert torch.isnan(early).all()
        torch.testing.assert_close(half[:, :4], torch.from_numpy(x[:, :4]), rtol=0, atol=0)
        assert torch.isnan(half[:, 4:]).all()


def test_an_assignment_is_not_folded_past_a_write_to_its_destination():
    # `t[...] = y` with y a fresh load normally makes the load write t directly; a write to t
    # between the load and the assignment (here a memset) must then stay before the data.
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        y = nl.load(x)
        t[...] = 1.0
        t[...] = y
        nl.store(out, t)
        return out

    x = np.arange(512, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(nki.simulate(k)(x), x)


# Large instructions run as partition ranges on several threads (runtime/nki/PartitionWorkers.h):
# every element must come out as on one thread, bit for bit, and as the plain reference.


@nki.jit
def _lanes(a, b, init):
    P, F = a.shape
    prod = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    affine = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    scaled = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((P, 1), nl.float32, buffer=nl.shared_hbm)
    scan = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    peak = nl.ndarray((P, 1), nl.float32, buffer=nl.shared_hbm)
    top = nl.ndarray((P, 8), nl.float32, buffer=nl.shared_hbm)
    where = nl.ndarray((P, 8), nl.uint32, buffer=nl.shared_hbm)
    narrow = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
    expd = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    x, y, s0 = nl.load(a), nl.load(b), nl.load(init)
    t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t, data1=x, data2=y, op=nl.multiply)
    nl.store(prod, t)
    u = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=u, data=t, op0=nl.add, operand0=1.5, op1=nl.multiply, operand1=0.25)
    nl.store(affine, u)
    v = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(dst=v, op=nl.copy, data=x, scale=2.0, reduce_op=nl.add, reduce_res=r)
    nl.store(scaled, v)
    nl.store(sums, r)
    w = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=w, data0=y, data1=x, initial=s0, op0=nl.multiply, op1=nl.add)
    nl.store(scan, w)
    nl.store(peak, nl.max(x, axis=1, keepdims=True))
    m = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=m, src=x)
    nl.store(top, m)
    i = nl.ndarray((P, 8), nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=i, data=x, vals=m)
    nl.store(where, i)
    h = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=h, src=x)
    nl.store(narrow, h)
    e = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=x)
    nl.store(expd, e)
    return prod, affine, scaled, sums, scan, peak, top, where, narrow, expd


def _bits(t):
    # a result as NumPy, bf16 as its bit patterns
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _at_threads(threads, kernel, *args):
    """The kernel's results (NumPy) at `threads` partition threads, and how many instructions
    ran split."""
    _nki.set_interpreter_threads(threads)
    try:
        count = _nki.split_instruction_count()
        out = kernel(*(torch.from_numpy(x) for x in args))
        out = tuple(_bits(t) for t in out) if isinstance(out, tuple) else _bits(out)
        return out, _nki.split_instruction_count() - count
    finally:
        _nki.set_interpreter_threads(0)


def _lanes_inputs(parts, free):
    rng = np.random.default_rng(7)
    # distinct values per row (max8 / find_index8 have one answer), moderate magnitudes
    a = (rng.permuted(np.tile(np.arange(free), (parts, 1)), axis=1) - free / 2).astype(np.float32)
    a /= np.float32(free)
    b = rng.uniform(0.5, 1.0, (parts, free)).astype(np.float32)
    init = rng.standard_normal((parts, 1), dtype=np.float32)
    return a, b, init


def test_instructions_split_over_partition_threads_match_one_thread_bit_for_bit():
    a, b, init = _lanes_inputs(128, 2048)  # 256K elements per tile: every instruction splits
    kernel = nki.simulate(_lanes)
    one, one_splits = _at_threads(1, kernel, a, b, init)
    many, many_splits = _at_threads(4, kernel, a, b, init)
    assert one_splits == 0
    # loads, stores, and each computing instruction above: the split path ran
    assert many_splits >= 15
    for got, want in zip(many, one):
        np.testing.assert_array_equal(got, want)

    prod, affine, scaled, sums, scan, peak, top, where, narrow, _ = many
    np.testing.assert_array_equal(prod, a * b)
    np.testing.assert_array_equal(affine, (a * b + np.float32(1.5)) * np.float32(0.25))
    np.testing.assert_array_equal(scaled, a * np.float32(2))
    acc = np.zeros(128, np.float32)  # the engine's fold: left to right in FP32
    for k in range(a.shape[1]):
        acc = acc + a[:, k] * np.float32(2)
    np.testing.assert_array_equal(sums[:, 0], acc)
    want = np.empty_like(a)
    s = init[:, 0].copy()
    for k in range(a.shape[1]):
        s = b[:, k] * s + a[:, k]
        want[:, k] = s
    np.testing.assert_array_equal(scan, want)
    np.testing.assert_array_equal(peak[:, 0], a.max(1))
    order = np.argsort(-a, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(top, np.take_along_axis(a, order, 1))
    np.testing.assert_array_equal(where, order.astype(np.uint32))
    np.testing.assert_array_equal(narrow, _bits(torch.from_numpy(a).to(torch.bfloat16)))


def test_small_instructions_and_overlapping_views_stay_on_one_thread():
    # A [128, 64] tile is below the split threshold: nothing splits at any thread count.
    a, b, init = _lanes_inputs(128, 64)
    kernel = nki.simulate(_lanes)
    one, _ = _at_threads(1, kernel, a, b, init)
    many, splits = _at_threads(4, kernel, a, b, init)
    assert splits == 0
    for got, want in zip(many, one):
        np.testing.assert_array_equal(got, want)

    # An operand that overlaps the destination other than as the same view (a shift along the
    # free axis of one tile) is computed whole: ranges would not change that, but it must stay
    # right when the loads and stores around it split.
    @nki.jit
    def shift(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        nisa.tensor_tensor(dst=x[:, 1:], data1=x[:, :-1], data2=x[:, 1:], op=nl.add)
        nl.store(out, x)
        return out

    big = np.random.default_rng(8).standard_normal((128, 2048), dtype=np.float32)
    got, splits = _at_threads(4, nki.simulate(shift), big)
    assert splits >= 2  # the load and the store
    want = big.copy()
    want[:, 1:] = big[:, :-1] + big[:, 1:]
    np.testing.assert_array_equal(got, want)


def test_the_thread_count_comes_from_nrtsim_nki_threads_and_a_bad_value_is_refused():
    code = "from nki import _nki; print(_nki.interpreter_threads())"
    env = dict(os.environ, NRTSIM_NKI_THREADS="3", OMP_NUM_THREADS="1")
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout.strip() == "3", got.stderr
    # Unset (or 0): automatic, the cores this process may run on, at most 4 (torch's
    # OMP_NUM_THREADS does not change it).
    auto = str(min(len(os.sched_getaffinity(0)), 4))
    for value in (None, "0"):
        env = dict(os.environ, OMP_NUM_THREADS="3")
        env.pop("NRTSIM_NKI_THREADS", None)
        if value is not None:
            env["NRTSIM_NKI_THREADS"] = value
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True)
        assert got.returncode == 0 and got.stdout.strip() == auto, got.stderr
    env = dict(os.environ, NRTSIM_NKI_THREADS="two")
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.returncode != 0 and "NRTSIM_NKI_THREADS='two'" in got.stderr, got.stderr


def test_a_store_whose_partitions_interleave_with_other_dims_splits_and_one_whose_rows_overlap_does_not():
    # A [128, 8, 128] tile stored into an [8, 128, 128] tensor (rope_hf's layout: partition p,
    # tile t -> row t * 128 + p): the partitions' rows interleave but share no memory, so the
    # store splits; a destination whose partition rows overlap (partition step 256 over rows of
    # 512 elements) is written by one thread in view order.
    @nki.jit
    def interleaved(a):
        out = nl.ndarray((8, 128, 128), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8, 128), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out.ap(pattern=[[128, 128], [16384, 8], [1, 128]], offset=0), src=t)
        return out

    a = np.random.default_rng(9).standard_normal((128, 8, 128), dtype=np.float32)
    one, _ = _at_threads(1, nki.simulate(interleaved), a)
    many, splits = _at_threads(2, nki.simulate(interleaved), a)
    assert splits == 2  # the load and the store
    np.testing.assert_array_equal(many, one)
    np.testing.assert_array_equal(many, a.transpose(1, 0, 2))

    @nki.jit
    def overlapping(a):
        out = nl.ndarray((256 * 127 + 512,), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out.ap(pattern=[[256, 128], [1, 512]], offset=0), src=t)
        return out

    b = np.random.default_rng(10).standard_normal((128, 512), dtype=np.float32)
    one, _ = _at_threads(1, nki.simulate(overlapping), b)
    many, splits = _at_threads(2, nki.simulate(overlapping), b)
    assert splits == 1  # the load; the store's rows overlap
    np.testing.assert_array_equal(many, one)
    want = np.empty(256 * 127 + 512, np.float32)
    for p in range(128):  # view order: each row over half of the one before
        want[256 * p:256 * p + 512] = b[p]
    np.testing.assert_array_equal(many, want)


def test_transposes_into_their_own_dtype_move_bits_as_the_staged_path_converts():
    # FP32 and BF16 transposes into a tile of the same dtype move the elements' bits (a BF16
    # NaN made quiet, as the conversion through FP32 and back does), from a window of a wider
    # tile too; a BF16 -> FP32 transpose (the staged path) gives the same grid.
    @nki.jit
    def k(a, h):
        t32 = nl.ndarray((96, 128), nl.float32, buffer=nl.shared_hbm)
        t16 = nl.ndarray((64, 128), nl.bfloat16, buffer=nl.shared_hbm)
        wide = nl.ndarray((64, 128), nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        y = nl.load(h)
        p32 = nl.ndarray((96, 128), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=p32, data=x[:, 32:128])
        nl.store(t32, nl.copy(p32))
        p16 = nl.ndarray((64, 128), nl.bfloat16, buffer=nl.psum)
        nisa.nc_transpose(dst=p16, data=y)
        nl.store(t16, nl.copy(p16))
        pw = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=pw, data=y)
        nl.store(wide, nl.copy(pw))
        return t32, t16, wide

    rng = np.random.default_rng(5)
    a = rng.standard_normal((128, 130), dtype=np.float32)
    h = torch.from_numpy(rng.standard_normal((128, 64), dtype=np.float32)).to(torch.bfloat16)
    bits = h.view(torch.int16)
    bits[3, 5] = 0x7f81  # a signalling NaN: quiet (0x7fc1) after the transpose
    bits[7, 9] = -0x7f7f  # 0x8081: a negative subnormal, kept as it is
    t32, t16, wide = k(torch.from_numpy(a), h)
    np.testing.assert_array_equal(t32.numpy(), a[:, 32:128].T)
    want = bits.numpy().T.copy()
    want[5, 3] = 0x7fc1
    np.testing.assert_array_equal(t16.view(torch.int16).numpy(), want)
    # BF16 -> FP32 widens the bits as they are (the NaN stays signalling)
    np.testing.assert_array_equal(wide.view(torch.int32).numpy(),
                                  bits.numpy().astype(np.int32).T << 16)


def test_a_memset_overwritten_whole_before_any_read_is_skipped_and_one_partly_overwritten_is_not():
    @nki.jit
    def k(x):
        whole = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        part = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.memset(t, -9948.0)          # all of it overwritten by the load: not run
        nisa.dma_copy(dst=t, src=x)
        nl.store(whole, nl.copy(t))
        u = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.memset(u, -9948.0)          # the last 8 columns stay: run
        nisa.dma_copy(dst=u[:, 0:56], src=x[:, 0:56])
        nl.store(part, nl.copy(u))
        return whole, part

    x = np.random.default_rng(3).standard_normal((128, 64), dtype=np.float32)
    whole, part = k(torch.from_numpy(x))
    np.testing.assert_array_equal(whole.numpy(), x)
    np.testing.assert_array_equal(part.numpy()[:, :56], x[:, :56])
    np.testing.assert_array_equal(part.numpy()[:, 56:], np.float32(-9948.0))


def _allowed_cpus(status):
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            count = 0
            for part in line.split(":", 1)[1].strip().split(","):
                lo, _, hi = part.partition("-")
                count += int(hi or lo) - int(lo) + 1
            return count
    return None


def test_partition_workers_run_off_the_callers_core():
    # Woken by the caller, a worker was placed on the caller's own core, where it took the
    # caller's time instead of adding a core's: the workers may run on every core but the one
    # the caller posted from.
    cores = len(os.sched_getaffinity(0))
    if cores < 2 or not os.path.isdir("/proc/self/task"):
        import pytest
        pytest.skip("needs two cores and /proc")
    a, b, init = _lanes_inputs(128, 2048)
    _, splits = _at_threads(2, nki.simulate(_lanes), a, b, init)
    assert splits > 0
    narrowed = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/status") as f:
                narrowed += _allowed_cpus(f.read()) == cores - 1
        except OSError:
            pass
    assert narrowed >= 1


@nki.jit
def _exp_rows(x, other):
    # flash attention's step: p = exp(scale * s - max) in BF16 with the FP32 row sums
    p_out = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.shared_hbm)
    sums = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
    s = nl.load(x)
    m = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(m, nl.max, s, axis=1)
    neg = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(neg, m, nl.multiply, -0.125)
    p = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(p, nl.exp, s, bias=neg, scale=0.125, reduce_op=nl.add, reduce_res=r)
    nl.store(p_out, p)
    nl.store(sums, r)
    copy = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)  # binds `other`
    nl.store(copy, nl.load(other))
    return p_out, sums, copy


def test_an_activation_with_a_reduction_streams_to_the_staged_paths_bits():
    # Arguments that share memory (one tensor passed twice) take the staged path everywhere;
    # apart, the activation streams and folds its row sums chunk by chunk (rows of 3,000
    # elements cross the 2,048-element chunks).
    x = torch.from_numpy(np.random.default_rng(9).standard_normal((128, 3000), dtype=np.float32))
    kernel = nki.simulate(_exp_rows)
    streamed = _bits_all(kernel(x, x.clone()))
    staged = _bits_all(kernel(x, x))
    for got, want in zip(streamed, staged):
        np.testing.assert_array_equal(got, want)
    p, sums, _ = streamed
    e = np.exp(x.numpy() * np.float32(0.125) - x.numpy().max(1, keepdims=True) * np.float32(0.125))
    np.testing.assert_allclose(sums[:, 0], e.sum(1), rtol=1e-5)


def _bits_all(out):
    return tuple(_bits(t) for t in out)
