"""Runtime offsets on SBUF / PSUM operands of every instruction (NKI 0.6: a VirtualRegister, a
device loop's induction value or a [1, 1] int32 SBUF tile as `scalar_offset` of `.ap`, or
`t[:, i]` / `t[:, nl.ds(i, n)]` / `t.select(d, tile)` along a free dim). Each kernel is traced
once and run with several runtime values, every result checked against NumPy on the same inputs;
an offset outside its dim is an NkiError at the kernel's line when the instruction runs; the
partition dim and per-partition offsets of on-chip tensors stay refused (AWS refuses them:
tests/nki/test_device_loops.py)."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def _count(n):
    return np.array([[n]], np.int32)


def _register_from(value):
    # A register loaded from a [1, 1] int32 HBM input (register_alloc with a tile loads it).
    sb = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=value)
    return nisa.register_alloc(sb)


@nki.jit
def tile_products(x, w, count):
    # For t < count: out[:, t, :] = x[:, t, :] * w[:, t, :] and acc += x[:, t, :]; tiles t >= count
    # of out stay 0. Every compute operand and destination is placed by the loop's index.
    parts, tiles, width = x.shape
    xs = nl.ndarray((parts, tiles, width), nl.float32, buffer=nl.sbuf)
    ws = nl.ndarray((parts, tiles, width), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=ws, src=w)
    res = nl.ndarray((parts, tiles, width), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=res, value=0.0)
    acc = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)

    def body(i):
        nisa.tensor_tensor(dst=res[:, i, :], data1=xs[:, i, :], data2=ws[:, nl.ds(i, 1), :],
                           op=nl.multiply)
        nisa.tensor_tensor(dst=acc, data1=acc,
                           data2=xs.ap([[tiles * width, parts], [1, width]], 0, scalar_offset=i,
                                       indirect_dim=1),
                           op=nl.add)

    nl.fori_loop(0, _register_from(count), body)
    out = nl.ndarray((parts, tiles + 1, width), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:tiles, :], src=res)
    nisa.dma_copy(dst=out[:, tiles, :], src=acc)
    return out


def test_compute_operands_and_destination_at_a_loop_index():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 5, 16)).astype(np.float32)
    w = rng.standard_normal((8, 5, 16)).astype(np.float32)
    for n in (0, 1, 3, 5):  # one specialisation, four trip counts
        want = np.zeros((8, 6, 16), np.float32)
        want[:, :n] = x[:, :n] * w[:, :n]
        acc = np.zeros((8, 16), np.float32)
        for t in range(n):
            acc = acc + x[:, t]  # in order, fp32, as the loop adds
        want[:, 5] = acc
        np.testing.assert_array_equal(nki.simulate(tile_products)(x, w, _count(n)), want)
    assert len(tile_products._cache) == 1  # traced once: the count and offsets are data


@nki.jit
def engines_at_offsets(x, y, at):
    # Scalar, GpSimd, Tensor and Vector instructions with operands placed by a register and by
    # a [1, 1] SBUF tile, PSUM among them: a matmul written into a PSUM tile at a runtime column
    # block and read back from there.
    parts, blocks, width = x.shape
    xs = nl.ndarray((parts, blocks, width), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    ys = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ys, src=y)
    tile_at = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile_at, src=at)
    reg = _register_from(at)
    out = nl.ndarray((5, parts, width), nl.float32, buffer=nl.shared_hbm)

    # Scalar engine: exp of block `at` (register through t[:, i, :]).
    e = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=xs[:, reg, :])
    nisa.dma_copy(dst=out[0], src=e)
    # GpSimd: block `at` + 1 written at a runtime offset (the [1, 1] tile through .ap).
    g = nl.ndarray((parts, blocks, width), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=g, value=0.0)
    nisa.tensor_scalar(dst=g.ap([[blocks * width, parts], [1, width]], 0, scalar_offset=tile_at,
                                indirect_dim=1),
                       data=xs.ap([[blocks * width, parts], [1, width]], 0,
                                  scalar_offset=tile_at, indirect_dim=1),
                       op0=nl.add, operand0=1.0, engine=nisa.engine.gpsimd)
    nisa.dma_copy(dst=out[1], src=g.select(1, tile_at))
    # Tensor engine into PSUM at a runtime block: ps[:, at, :] = xs[:, at, :]^T-contracted.
    ps = nl.ndarray((parts, blocks, width), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps[:, reg, :], stationary=ys[:, 0:parts], moving=xs[:, reg, :])
    m = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=m, src=ps[:, nl.ds(reg, 1), :])  # PSUM read at a runtime offset
    nisa.dma_copy(dst=out[2], src=m)
    # nl.* on an operand at a runtime offset.
    nisa.dma_copy(dst=out[3], src=nl.multiply(xs[:, reg, :], ys))
    # A window along the innermost dim: columns [at, at + 4) of ys, into columns 0:4.
    win = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=win, value=0.0)
    nisa.tensor_copy(dst=win[:, 0:4], src=ys[:, nl.ds(reg, 4)])
    nisa.dma_copy(dst=out[4], src=win)
    return out


def test_every_engine_takes_runtime_offsets_psum_included():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 3, 32)).astype(np.float32)
    y = rng.standard_normal((16, 32)).astype(np.float32)
    for at in (0, 2, 1):
        got = nki.simulate(engines_at_offsets)(x, y, _count(at))
        np.testing.assert_allclose(got[0], np.exp(x[:, at]), rtol=1e-6)
        np.testing.assert_array_equal(got[1], x[:, at] + np.float32(1.0))
        # nc_matmul: dst[M, N] = stationary[K, M]^T @ moving[K, N], accumulated in fp32.
        np.testing.assert_allclose(got[2], y[:, :16].T @ x[:, at], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got[3], x[:, at] * y)
        win = np.zeros_like(y)
        win[:, 0:4] = y[:, at:at + 4]
        np.testing.assert_array_equal(got[4], win)
    assert len(engines_at_offsets._cache) == 1


@nki.jit
def running_window(x, count):
    # A loop-carried [1, 1] SBUF index (not the loop's register): each iteration reads the
    # window at the index, then moves the index by 3. out[t] = x[:, 3t : 3t + 4] * 2.
    parts, width = x.shape
    xs = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    pos = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=pos, value=0)
    out = nl.ndarray((4, parts, 4), nl.float32, buffer=nl.shared_hbm)
    zero = nl.ndarray((parts, 4), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    for t in range(4):
        nisa.dma_copy(dst=out[t], src=zero)
    for i in nl.dynamic_range(_register_from(count)):
        w = nl.ndarray((parts, 4), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=w, data=xs.ap([[width, parts], [1, 4]], 0, scalar_offset=pos,
                                             indirect_dim=1),
                           op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[i], src=w)
        nisa.tensor_scalar(dst=pos, data=pos, op0=nl.add, operand0=3)
    return out


def test_an_index_tile_is_read_every_time_the_instruction_runs():
    x = np.arange(2 * 13, dtype=np.float32).reshape(2, 13)
    for n in (0, 2, 4):
        want = np.zeros((4, 2, 4), np.float32)
        for t in range(n):
            want[t] = 2 * x[:, 3 * t:3 * t + 4]
        np.testing.assert_array_equal(nki.simulate(running_window)(x, _count(n)), want)
    # A fifth window would start at column 12 of 13: the offset (in elements) may be 0..9, so
    # it is out of range when it runs, and the message names the kernel line.
    with pytest.raises(nki.NkiError, match=r"test_runtime_offsets.py:\d+ in kernel "
                                           r"'running_window'.*index 12 .*outside \[0, 10\)"):
        nki.simulate(running_window)(np.zeros((2, 13), np.float32), _count(5))
    assert len(running_window._cache) == 1


@nki.jit
def write_column(x, at):
    # dst placed at run time: column `at` of a [P, 6] tile set to x's one column; the tile is
    # zero elsewhere.
    parts = x.shape[0]
    xs = nl.ndarray((parts, 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    t = nl.ndarray((parts, 6), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0)
    nisa.tensor_copy(dst=t[:, nl.ds(_register_from(at), 1)], src=xs)
    out = nl.ndarray((parts, 6), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_destination_out_of_range_is_an_error_before_anything_moves():
    x = np.arange(4, dtype=np.float32).reshape(4, 1)
    for at in (0, 5):
        want = np.zeros((4, 6), np.float32)
        want[:, at] = x[:, 0]
        np.testing.assert_array_equal(nki.simulate(write_column)(x, _count(at)), want)
    for at in (6, -1):
        with pytest.raises(nki.NkiError, match=r"test_runtime_offsets.py:\d+ in kernel "
                                               rf"'write_column'.*index {at} \(the runtime "
                                               r"offset of the destination\) is outside \[0, 6\)"):
            nki.simulate(write_column)(x, _count(at))


@nki.jit
def skip_sbuf_side(x, at):
    # oob_mode.skip on a DMA whose SBUF side is placed at run time: out of range, nothing moves.
    t = nl.ndarray((2, 4), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=-1.0)
    xs = nl.ndarray((2, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=t, src=xs[:, nl.ds(_register_from(at), 4)], oob_mode=nisa.oob_mode.skip)
    out = nl.ndarray((2, 4), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_oob_mode_skip_on_the_sbuf_side_moves_nothing():
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(nki.simulate(skip_sbuf_side)(x, _count(4)), x[:, 4:8])
    np.testing.assert_array_equal(nki.simulate(skip_sbuf_side)(x, _count(5)), np.full((2, 4), -1.0))


@nki.jit
def big_rows(x, at):
    # [128, 256] fp32 operands at a runtime offset: large enough to run split over partition
    # ranges on the interpreter's threads.
    parts, blocks, width = x.shape
    xs = nl.ndarray((parts, blocks, width), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    r = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    reg = _register_from(at)
    nisa.tensor_tensor(dst=r, data1=xs[:, reg, :], data2=xs[:, 0, :], op=nl.subtract)
    out = nl.ndarray((parts, width), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_large_instructions_at_runtime_offsets_on_several_threads():
    from nki import _nki
    x = np.random.default_rng(2).standard_normal((128, 3, 256)).astype(np.float32)
    try:
        for threads in (1, 2):
            _nki.set_interpreter_threads(threads)
            split = _nki.split_instruction_count()
            for at in (2, 1):
                np.testing.assert_array_equal(nki.simulate(big_rows)(x, _count(at)), x[:, at] - x[:, 0])
            assert (_nki.split_instruction_count() > split) == (threads > 1)
    finally:
        _nki.set_interpreter_threads(0)


def test_a_runtime_offset_costs_the_dynamic_initiation_interval():
    # AWS: max(MIN_II_DYNAMIC, N) cycles, MIN_II_DYNAMIC roughly 600 engine cycles.
    def kernel(x, at, dynamic):
        xs = nl.ndarray((2, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        t = nl.ndarray((2, 2), nl.float32, buffer=nl.sbuf)
        src = xs[:, nl.ds(_register_from(at), 2)] if dynamic else xs[:, 0:2]
        nisa.tensor_copy(dst=t, src=src, engine=nisa.engine.vector)
        out = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    busy = {}
    for dynamic in (False, True):
        k = nki.jit(lambda x, at, dynamic=dynamic: kernel(x, at, dynamic))
        nki.simulate(k)(np.zeros((2, 8), np.float32), _count(0))
        busy[dynamic] = k.last_run.busy_ns["vector"]
    # A 2-element copy costs its 60-cycle access start and a few cycles of data; the same copy
    # from a runtime offset, 600 cycles.
    assert busy[True] > 5 * busy[False]


def test_a_view_at_a_runtime_offset_is_not_re_indirected():
    def kernel(x, at, what):
        xs = nl.ndarray((2, 4, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        reg = _register_from(at)
        moved = xs[:, reg, :]
        if what == "twice":
            moved = moved[:, nl.ds(reg, 2)]
        elif what == "view":
            moved = moved.view(nl.bfloat16)
        t = nl.ndarray((2, 8), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=moved)
        return x

    for what, msg in (("twice", "one runtime offset per access"),
                      ("view", "cannot be reinterpreted")):
        k = nki.jit(lambda x, at, what=what: kernel(x, at, what))
        with pytest.raises(nki.NkiError, match=msg):
            nki.simulate(k)(np.zeros((2, 4, 8), np.float32), _count(0))


def test_on_chip_integer_indexing_stays_two_dimensional():
    # NKI 0.6 (NkiTensor.__getitem__: "Result is always at least 2D"; the language guide's
    # examples), for static and runtime indices alike; HBM drops the indexed dim.
    seen = {}

    @nki.jit
    def shapes(x, at):
        t = nl.ndarray((64, 64, 64), nl.float32, buffer=nl.sbuf)
        h = nl.ndarray((4, 128, 32), nl.float32, buffer=nl.shared_hbm)
        two = nl.ndarray((8, 6), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=two, src=x)
        i = _register_from(at)
        seen.update({"t[0, 0, 10]": t[0, 0, 10].shape, "t[:, 0]": t[:, 0].shape,
                     "t[:, 0, 10]": t[:, 0, 10].shape, "t[0, ..., :]": t[0, ..., :].shape,
                     "h[0, :, :]": h[0, :, :].shape, "two[:, i]": two[:, i].shape})
        col = nl.ndarray((8, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=col, src=two[:, i])
        out = nl.ndarray((8, 1), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=col)
        return out

    x = np.arange(48, dtype=np.float32).reshape(8, 6)
    for at in (0, 5):
        np.testing.assert_array_equal(nki.simulate(shapes)(x, _count(at)), x[:, at:at + 1])
    assert seen == {"t[0, 0, 10]": (1, 1), "t[:, 0]": (64, 64), "t[:, 0, 10]": (64, 1),
                    "t[0, ..., :]": (1, 64, 64), "h[0, :, :]": (128, 32), "two[:, i]": (8, 1)}


@nki.jit
def column_blocks(x, y, count):
    # The brief form sb[:, nl.ds(i * 128, 128)]: Python arithmetic on a register is refused (as
    # AWS refuses it), so the 128-column blocks are a dim of their own (reshape), indexed by i.
    parts, width = x.shape
    xs = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    ys = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=ys, src=y)
    res = nl.ndarray((parts, width), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=res, value=0.0)
    xb, yb = xs.reshape((parts, width // 128, 128)), ys.reshape((parts, width // 128, 128))
    rb = res.reshape((parts, width // 128, 128))

    def body(i):
        nisa.tensor_tensor(dst=rb[:, nl.ds(i, 1), :], data1=xb[:, i, :], data2=yb[:, i, :],
                           op=nl.maximum)

    nl.fori_loop(0, _register_from(count), body)
    out = nl.ndarray((parts, width), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_column_blocks_of_128_at_a_loop_index():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 512)).astype(np.float32)
    y = rng.standard_normal((128, 512)).astype(np.float32)
    for n in (4, 1, 0, 3):
        want = np.zeros_like(x)
        want[:, :128 * n] = np.maximum(x, y)[:, :128 * n]
        np.testing.assert_array_equal(nki.simulate(column_blocks)(x, y, _count(n)), want)
    assert len(column_blocks._cache) == 1

    @nki.jit
    def arithmetic(x, count):
        xs = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        nl.fori_loop(0, _register_from(count),
                     lambda i: nisa.tensor_copy(dst=xs[:, 0:128], src=xs[:, nl.ds(i * 128, 128)]))
        return x

    with pytest.raises(TypeError, match="Python arithmetic"):
        nki.simulate(arithmetic)(x, _count(1))
