"""NKI 0.6's registers and device-side loops: nisa.register_alloc / move / load / store,
VirtualRegister, nl.fori_loop and nl.dynamic_range with register bounds, nl.while_loop and
`while reg:`. A loop's trip count is read from a register when the kernel runs: one
specialisation runs with any count, each checked against NumPy; runtime offsets from the
induction register are bounds-checked when they run; the modelled time counts the iterations."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def run(kernel, *args):
    return nki.simulate(kernel)(*args)


def _count(n):
    return np.array([[n]], np.int32)


def _load_register(count):
    sb = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=count)
    reg = nisa.register_alloc()
    nisa.register_load(reg, sb)
    return reg


@nki.jit
def scale_rows_fori(x, count):
    # out[i, :] = 2 * x[i, :] for i < count (a runtime value); the rest of out stays 0.
    rows, d = x.shape
    out = nl.ndarray((rows, d), nl.float32, buffer=nl.shared_hbm)
    zero = nl.ndarray((rows, d), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    nisa.dma_copy(dst=out, src=zero)
    n = _load_register(count)

    def body(i):
        t = nl.ndarray((1, d), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[d, 1], [1, d]], offset=0, scalar_offset=i,
                                      indirect_dim=0))
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out.ap([[d, 1], [1, d]], offset=0, scalar_offset=i, indirect_dim=0),
                      src=t)

    nl.fori_loop(0, n, body)
    return out


def _scaled_rows(x, n):
    want = np.zeros_like(x)
    want[:n] = 2 * x[:n]
    return want


def test_fori_loop_trip_count_is_read_when_the_kernel_runs():
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    outs = {n: run(scale_rows_fori, x, _count(n)) for n in (3, 6, 0)}
    for n, out in outs.items():
        np.testing.assert_array_equal(out, _scaled_rows(x, n))
    # One specialisation served every count: the count is data, not a constant.
    assert len(scale_rows_fori._cache) == 1


def test_device_loop_time_counts_the_iterations():
    x = np.ones((8, 16), np.float32)
    times = {}
    for n in (2, 4, 6):
        run(scale_rows_fori, x, _count(n))
        times[n] = scale_rows_fori.last_run.makespan_ns
    # Each iteration costs the body's own time: the differences are equal and positive.
    assert times[4] - times[2] > 0
    assert times[6] - times[4] == pytest.approx(times[4] - times[2], rel=1e-9)
    run(scale_rows_fori, x, _count(0))
    assert scale_rows_fori.last_run.makespan_ns < times[2]


@nki.jit
def dynamic_add(a, b, tiles):
    # The shape of AWS's dynamic-shape elementwise add: a dynamic_range over a register count,
    # the row offset carried in an SBUF tile that the body advances.
    m, h = a.shape
    p = 4
    out = nl.ndarray((m, h), a.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((m, h), a.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    nisa.dma_copy(dst=out, src=zero)
    n = _load_register(tiles)
    start = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=start, value=0)
    for _ in nl.dynamic_range(0, n, 1):
        ta = nl.ndarray((p, h), a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray((p, h), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a.ap([[h, p], [1, h]], offset=0, scalar_offset=start,
                                       indirect_dim=0))
        nisa.dma_copy(dst=tb, src=b.ap([[h, p], [1, h]], offset=0, scalar_offset=start,
                                       indirect_dim=0))
        s = nl.ndarray((p, h), a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=s, data1=ta, data2=tb, op=nl.add)
        nisa.dma_copy(dst=out.ap([[h, p], [1, h]], offset=0, scalar_offset=start,
                                 indirect_dim=0), src=s)
        nisa.tensor_scalar(dst=start, data=start, op0=nl.add, operand0=p)
    return out


def test_dynamic_range_with_loop_carried_offset():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((16, 8)).astype(np.float32)
    for n in (1, 3, 4):
        want = np.zeros_like(a)
        want[:4 * n] = a[:4 * n] + b[:4 * n]
        np.testing.assert_array_equal(run(dynamic_add, a, b, _count(n)), want)


def test_runtime_offset_out_of_range_is_an_error_naming_the_line():
    a = np.ones((16, 8), np.float32)
    # 5 tiles of 4 rows need 20 rows of 16: the fifth iteration's offset is out of range.
    with pytest.raises(nki.NkiError, match=r"test_device_loops.py:\d+ in kernel 'dynamic_add'.*"
                                           r"index 16 .*outside"):
        run(dynamic_add, a, a, _count(5))


@nki.jit
def nested_sums(x, y, outer, inner):
    # out[i, :] = x[i, :] + sum_{j < inner} y[j, :] for i < outer; both counts are runtime values.
    rows, d = x.shape
    out = nl.ndarray((rows, d), nl.float32, buffer=nl.shared_hbm)
    zero = nl.ndarray((rows, d), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    nisa.dma_copy(dst=out, src=zero)
    n_out = _load_register(outer)
    n_in = _load_register(inner)
    for i in nl.dynamic_range(n_out):
        acc = nl.ndarray((1, d), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=acc, src=x.ap([[d, 1], [1, d]], offset=0, scalar_offset=i,
                                        indirect_dim=0))
        for j in nl.dynamic_range(n_in):
            t = nl.ndarray((1, d), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=y.ap([[d, 1], [1, d]], offset=0, scalar_offset=j,
                                          indirect_dim=0))
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.dma_copy(dst=out.ap([[d, 1], [1, d]], offset=0, scalar_offset=i, indirect_dim=0),
                      src=acc)
    return out


def test_nested_device_loops():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    y = rng.standard_normal((5, 8)).astype(np.float32)
    for no, ni in ((6, 5), (2, 3), (3, 0), (0, 4)):
        want = np.zeros_like(x)
        want[:no] = x[:no]
        for j in range(ni):  # the kernel's order: one row of y at a time, in float32
            want[:no] = want[:no] + y[j]
        np.testing.assert_array_equal(run(nested_sums, x, y, _count(no), _count(ni)), want)


def _repeat_add_setup(x, count):
    # x in SBUF, a zeroed accumulator and the count in an SBUF tile (registers have no
    # arithmetic: the bodies below decrement the tile and reload a register from it).
    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    acc = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    left = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=left, src=count)
    return t, acc, left


def _repeat_add_step(t, acc, left):
    nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nisa.tensor_scalar(dst=left, data=left, op0=nl.subtract, operand0=1)


def _store(acc):
    out = nl.ndarray(acc.shape, nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def repeat_add_while_loop(x, count):
    # acc = count * x: nl.while_loop on a register the body decrements and returns.
    t, acc, left = _repeat_add_setup(x, count)
    init = nisa.register_alloc(left)

    def body(r):
        _repeat_add_step(t, acc, left)
        nxt = nisa.register_alloc()
        nisa.register_load(nxt, left)
        return nxt

    nl.while_loop(init, body)
    return _store(acc)


@nki.jit
def repeat_add_while_reg(x, count):
    # The same with the parser frontend's `while reg:`, reloading the register in the body.
    t, acc, left = _repeat_add_setup(x, count)
    reg = nisa.register_alloc()
    nisa.register_load(reg, left)
    while reg:
        _repeat_add_step(t, acc, left)
        nisa.register_load(reg, left)
    return _store(acc)


@pytest.mark.parametrize("kernel", [repeat_add_while_loop, repeat_add_while_reg])
def test_while_loops_run_until_the_register_is_zero(kernel):
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    for n in (0, 1, 5):
        want = np.zeros_like(x)
        for _ in range(n):
            want = want + x
        np.testing.assert_array_equal(run(kernel, x, _count(n)), want)


@nki.jit
def register_round_trip(src):
    # register_alloc(int), register_move (constant and register), register_load (HBM), and
    # register_store to HBM and SBUF.
    out = nl.ndarray((1, 4), nl.int32, buffer=nl.shared_hbm)
    a = nisa.register_alloc(7)
    b = nisa.register_alloc()
    nisa.register_move(b, a)
    c = nisa.register_alloc()
    nisa.register_load(c, src)
    d = nisa.VirtualRegister(-3)  # the class itself, with an initial value
    assert isinstance(d, nisa.VirtualRegister)
    nisa.register_store(out[0:1, 0:1], a)
    nisa.register_store(out[0:1, 1:2], b)
    nisa.register_store(out[0:1, 2:3], c)
    sb = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.register_store(sb, d)
    nisa.dma_copy(dst=out[0:1, 3:4], src=sb)
    return out


def test_register_store_reads_back():
    np.testing.assert_array_equal(run(register_round_trip, _count(41)), [[7, 7, 41, -3]])


def test_register_values_do_not_exist_at_specialisation():
    def branch(x):
        r = nisa.register_alloc(1)
        if r:
            pass
        return x

    with pytest.raises(nki.NkiError, match="Python cannot branch on it"):
        run(nki.jit(branch), np.ones((1, 1), np.float32))

    def convert(x):
        r = nisa.register_alloc(1)
        int(r)
        return x

    with pytest.raises(TypeError, match="exists only when the kernel runs"):
        run(nki.jit(convert), np.ones((1, 1), np.float32))


def test_float_register_load_and_bad_operands_are_refused():
    def float_load(x):
        t = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.register_load(nisa.register_alloc(), t)
        return x

    with pytest.raises(nki.NkiError, match="how the hardware converts a float"):
        run(nki.jit(float_load), np.ones((1, 1), np.float32))

    def wide_load(x):
        t = nl.ndarray((1, 2), nl.int32, buffer=nl.sbuf)
        nisa.register_load(nisa.register_alloc(), t)
        return x

    with pytest.raises(nki.NkiError, match="one value"):
        run(nki.jit(wide_load), np.ones((1, 1), np.float32))

    def write_induction(x):
        nl.fori_loop(0, nisa.register_alloc(2), lambda i: nisa.register_move(i, 1))
        return x

    with pytest.raises(nki.NkiError, match="frozen"):
        run(nki.jit(write_induction), np.ones((1, 1), np.float32))


def test_reading_a_register_nothing_set_is_an_error():
    def unset(x):
        for _ in nl.dynamic_range(nisa.register_alloc()):
            pass
        return x

    with pytest.raises(nki.NkiError, match="nothing has set yet"):
        run(nki.jit(unset), np.ones((1, 1), np.float32))


def test_leaving_a_device_loop_early_is_an_error():
    def broken(x):
        for _ in nl.dynamic_range(nisa.register_alloc(3)):
            break
        return x

    with pytest.raises(nki.NkiError, match="left before it ended"):
        run(nki.jit(broken), np.ones((1, 1), np.float32))


def test_endless_while_loop_is_stopped():
    @nki.jit
    def endless(x):
        reg = nisa.register_alloc(1)
        while reg:
            pass
        return x

    with pytest.raises(nki.NkiError, match="without ending"):
        run(endless, np.ones((1, 1), np.float32))


@nki.jit
def doubling_halves(x, counts, barrier):
    # LNC=2: each core doubles its half of the rows once per iteration of its own device loop,
    # its count from its own row of `counts`; with `barrier`, the loop holds a core barrier.
    p, d = x.shape
    h = p // 2
    core = nl.program_id(0)
    out = nl.ndarray((p, d), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((h, d), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[core * h:(core + 1) * h, :])
    n = _load_register(counts[core:core + 1, :])
    for _ in nl.dynamic_range(0, n):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        if barrier:
            nisa.dma_copy(dst=out[core * h:(core + 1) * h, :], src=t)
            nisa.core_barrier(t, (0, 1))  # an SBUF tile as data, as AWS's MoE kernel passes
    nisa.dma_copy(dst=out[core * h:(core + 1) * h, :], src=t)
    return out


def _halves(x, n0, n1, barrier):
    return nki.simulate(doubling_halves[2])(x, np.array([[n0], [n1]], np.int32), barrier)


def test_device_loop_holding_a_barrier_runs_on_both_cores_together():
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    for n in (0, 1, 3):
        np.testing.assert_array_equal(_halves(x, n, n, True), x * 2.0 ** n)
    # Counts that differ: the core still looping would wait at the barrier forever.
    with pytest.raises(nki.NkiError, match="ends on one core and not on the other after 2 "
                                           "iterations"):
        _halves(x, 2, 3, True)


def test_device_loops_of_two_programs_run_each_whole():
    # Without a synchronisation inside, each core's loop runs its own count.
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    want = np.concatenate([x[:4] * 4, x[4:] * 8])
    np.testing.assert_array_equal(_halves(x, 2, 3, False), want)


def test_device_launch_charges_the_run_iterations():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_neuronx")
    x = torch.arange(128, dtype=torch.float32).reshape(8, 16)
    for n in (2, 5):
        count = torch.tensor([[n]], dtype=torch.int32)
        host = nki.simulate(scale_rows_fori)(x, count)
        host_ns = scale_rows_fori.last_run.makespan_ns
        out = scale_rows_fori(x.to("neuron"), count.to("neuron"))
        assert torch.equal(out.cpu(), host)
        assert scale_rows_fori.last_run.makespan_ns == pytest.approx(host_ns, rel=1e-12)


def test_core_barrier_takes_an_sbuf_tile_as_data():
    # AWS's page asks for shared HBM; AWS's dynamic MoE kernel passes an SBUF tile.
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(_halves(x, 1, 1, True), 2 * x)

    @nki.jit
    def psum_data(a):
        t = nl.ndarray((1, 1), nl.float32, buffer=nl.psum)
        nisa.core_barrier(t, (0, 1))
        return a

    with pytest.raises(nki.NkiError, match="got a PSUM tile"):
        nki.simulate(psum_data[2])(np.ones((1, 1), np.float32))


@nki.jit
def dynamic_slices(x, count):
    # out[2 i : 2 i + 2, :] = x[i, :] (both rows) for i < count: a register as an integer index
    # (the dim dropped) and as nl.ds's start, i.e. dynamic slices of HBM tensors.
    rows, d = x.shape
    out = nl.ndarray((2 * rows, d), nl.float32, buffer=nl.shared_hbm)
    zero = nl.ndarray((2 * rows, d), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    nisa.dma_copy(dst=out, src=zero)
    pos = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=pos, value=0)
    for i in nl.dynamic_range(_load_register(count)):
        t = nl.ndarray((1, d), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i])
        two = nl.ndarray((2, d), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=two[0:1, :], src=t)
        nisa.dma_copy(dst=two[1:2, :], src=t)
        start = nisa.register_alloc(pos)
        nisa.dma_copy(dst=out[nl.ds(start, 2), :], src=two)
        nisa.tensor_scalar(dst=pos, data=pos, op0=nl.add, operand0=2)
    return out


def test_register_indices_are_dynamic_slices():
    x = np.random.default_rng(4).standard_normal((5, 8)).astype(np.float32)
    for n in (0, 2, 5):
        want = np.zeros((10, 8), np.float32)
        want[:2 * n] = np.repeat(x[:n], 2, axis=0)
        np.testing.assert_array_equal(run(dynamic_slices, x, _count(n)), want)
    # A slice of 2 rows from row 9 of 10 is out of range when it runs.
    @nki.jit
    def past_end(x, at):
        out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((2, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(_load_register(at), 2), :])
        nisa.dma_copy(dst=out[0:2, :], src=t)
        nisa.dma_copy(dst=out[2:4, :], src=t)
        return out

    np.testing.assert_array_equal(run(past_end, x, _count(3)), np.tile(x[3:5], (2, 1)))
    with pytest.raises(nki.NkiError, match=r"test_device_loops.py:\d+ in kernel 'past_end'.*"
                                           r"index 4 .*outside \[0, 4\)"):
        run(past_end, x, _count(4))


def test_nested_loop_time_is_linear_in_each_loops_iterations():
    # T(outer, inner) = T0 + outer * A + outer * inner * B: each loop's own cost once per
    # iteration run, the inner body's once per inner iteration in all.
    x = np.ones((6, 8), np.float32)
    y = np.ones((5, 8), np.float32)

    def t(no, ni):
        run(nested_sums, x, y, _count(no), _count(ni))
        return nested_sums.last_run.makespan_ns

    b2 = t(2, 3) - t(2, 2)
    b3 = t(3, 3) - t(3, 2)
    assert b2 > 0 and b3 == pytest.approx(1.5 * b2, rel=1e-9)
    a_plus_2b = t(3, 2) - t(2, 2)
    assert a_plus_2b > b2


@nki.jit
def sbuf_tiles(x, count):
    # out[:, t, :] = 2 * x[:, t, :] for t < count, 0 after: each tile read from and written to
    # an SBUF buffer at a register offset along a free dim (t[:, i, :], .ap(scalar_offset=)
    # with a register and with a [1, 1] tile, nl.ds(i, 1)) by nisa.dma_copy.
    parts, tiles, w = x.shape
    out = nl.ndarray((parts, tiles, w), nl.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray((parts, tiles, w), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=buf, src=x)
    res = nl.ndarray((parts, tiles, w), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=res, value=0.0)
    pos = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=pos, value=0)
    for i in nl.dynamic_range(_load_register(count)):
        a = nl.ndarray((parts, w), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=buf[:, i, :])
        b = nl.ndarray((parts, w), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=buf.ap([[tiles * w, parts], [1, w]], 0, scalar_offset=i,
                                        indirect_dim=1))
        c = nl.ndarray((parts, w), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c, src=buf.ap([[tiles * w, parts], [1, w]], 0, scalar_offset=pos,
                                        indirect_dim=1))
        s = nl.ndarray((parts, w), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=s, data1=a, data2=b, op=nl.add)
        nisa.tensor_tensor(dst=s, data1=s, data2=c, op=nl.add)
        nisa.tensor_scalar(dst=s, data=s, op0=nl.multiply, operand0=2.0 / 3.0)
        nisa.dma_copy(dst=res[:, nl.ds(i, 1), :], src=s)
        nisa.tensor_scalar(dst=pos, data=pos, op0=nl.add, operand0=1)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_register_offsets_on_sbuf_free_dims():
    x = np.random.default_rng(5).integers(-8, 8, (4, 5, 6)).astype(np.float32)
    for n in (0, 2, 5):  # one specialisation, three counts
        # a + b + c is 3 x exactly (small integers); times fl32(2/3), one rounding each.
        want = np.zeros_like(x)
        want[:, :n] = (3 * x[:, :n]) * np.float32(2.0 / 3.0)
        np.testing.assert_array_equal(run(sbuf_tiles, x, _count(n)), want)
    assert len(sbuf_tiles._cache) == 1  # the count and the offsets are data, not constants


@nki.jit
def sbuf_window(x, at):
    # The window x[:, at : at + 2] read through an SBUF buffer at a runtime offset.
    out = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray((2, 5), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=buf, src=x)
    t = nl.ndarray((2, 2), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=buf[:, nl.ds(_load_register(at), 2)])
    nl.store(out, t)
    return out


def test_sbuf_register_offset_is_checked_when_it_runs():
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    for at in (0, 3):
        np.testing.assert_array_equal(run(sbuf_window, x, _count(at)), x[:, at:at + 2])
    for at in (4, -1):
        with pytest.raises(nki.NkiError, match=r"test_device_loops.py:\d+ in kernel "
                                               rf"'sbuf_window'.*index {at} .*outside \[0, 4\)"):
            run(sbuf_window, x, _count(at))


def test_on_chip_runtime_offsets_refused_where_aws_refuses_them():
    # Compute operands, PSUM tiles and nl.* at runtime offsets run (test_runtime_offsets.py);
    # what AWS refuses stays refused, with its reason: the partition dim of an on-chip tensor
    # (NkiTensor.select) and per-partition offsets into one (vector_select: HBM only).
    def kernel(x, count, what):
        buf = nl.ndarray((4, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=buf, src=x)
        i = _load_register(count)
        t = nl.ndarray((4, 2), nl.float32, buffer=nl.sbuf)
        if what == "partition":
            nisa.dma_copy(dst=t[0:1, :], src=buf[nl.ds(i, 1), 0:2])
        elif what == "ap partition":
            nisa.tensor_copy(dst=t[0:1, :], src=buf.ap([[8, 1], [1, 2]], 0, scalar_offset=i,
                                                       indirect_dim=0))
        else:
            idx = nl.ndarray((4, 1), nl.int32, buffer=nl.sbuf)
            nisa.memset(dst=idx, value=0)
            nisa.tensor_copy(dst=t, src=buf.ap([[8, 4], [1, 2]], 0, vector_offset=idx,
                                               indirect_dim=1))
        out = nl.ndarray((4, 2), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.zeros((4, 8), np.float32)
    for what, msg in (("partition", "Dynamic on-chip: dim must not be 0"),
                      ("ap partition", "Dynamic on-chip: dim must not be 0"),
                      ("vector", "Only supported on HBM tensors")):
        k = nki.jit(lambda x, count, what=what: kernel(x, count, what))
        with pytest.raises(nki.NkiError, match=msg):
            run(k, x, _count(1))
