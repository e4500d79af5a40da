"""The legacy direct allocation API (neuronxcc.nki.compiler as ncc): sbuf / psum alloc and
mod_alloc place each logical tile; the interpreter checks each placement against the hardware's
rules and sizes (torch_neuronx/data/neuron_cores.ini), refuses placed tiles that share bytes
while both are live, orders reuse of the same bytes in the timeline, and reports every use with
its NKI 0.6 spelling. Values do not depend on placement. The kernels are this project's own;
NumPy is the reference."""

import functools
import inspect

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc.nki.language import par_dim

U32 = np.finfo(np.float32).eps / 2


def _line(kernel, text):
    fn = getattr(kernel, "fn", kernel)
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def scale_blocks(n_free_tiles):
    """out[k] = 9 * a[k] for four [128, 2048] blocks through a (4, par_dim(128), 2048) SBUF
    tensor whose logical tiles share `n_free_tiles` physical ones (modulo allocation). Seven
    Vector instructions read each block: compute outweighs its load."""

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        blocks = nl.ndarray((4, par_dim(128), 2048), dtype=a.dtype,
                            buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(n_free_tiles,)))
        results = []
        for k in nl.affine_range(4):
            blocks[k] = nl.load(a[k])
            y = nl.multiply(blocks[k], 3.0)
            for _ in range(6):
                y = nl.add(y, blocks[k])
            results.append(y)
        for k in nl.affine_range(4):
            nl.store(out[k], value=results[k])
        return out

    return kernel


def test_modulo_allocation_runs_and_reuse_is_ordered_in_the_timeline():
    # Small integers: 9 * a is exact in every order of the additions.
    a = np.random.default_rng(1).integers(-8, 8, (4, 128, 2048)).astype(np.float32)
    runs = {}
    for n in (1, 2, 4):
        k = scale_blocks(n)
        np.testing.assert_array_equal(nki.simulate_kernel(k, a), 9 * a)
        runs[n] = k.last_run.makespan_ns
        (entry,) = [r for r in k.migration_report() if r[2] == "ncc.sbuf.mod_alloc(...)"]
        assert "address=(0, 0)" in entry[3] and "block dims become a Python list" in entry[3]
    # One physical tile: each block's load waits for the previous block's readers; four: none
    # waits. The modelled times are deterministic.
    assert runs[1] > runs[4]
    assert runs[1] >= runs[2] >= runs[4]


@nki.jit
def two_live_on_the_same_bytes(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray((par_dim(128), 64), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    y = nl.ndarray((par_dim(128), 64), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=128))
    x[...] = nl.load(a)
    y[...] = nl.exp(x)  # y's bytes 128..383 overlap x's 0..255 while x is still read below
    nl.store(out, value=nl.add(x, y))
    return out


def test_placed_tiles_live_at_once_on_shared_bytes_are_refused():
    x_line = _line(two_live_on_the_same_bytes, "x = nl.ndarray")
    with pytest.raises(nki.NkiError, match=(
            rf"the tiles of the tensor allocated at line {x_line} and of the tensor allocated at "
            rf"line {x_line + 1} are placed on the same SBUF bytes \(partitions 0\.\.127, bytes "
            rf"128\.\.255\) and are live at once: the second is first used at line {x_line + 3} "
            rf"while the first is still used at line {x_line + 4}")):
        nki.simulate_kernel(two_live_on_the_same_bytes, np.ones((128, 64), np.float32))
    # With the placements dropped (automatic allocation) it runs.
    forced = ncc.force_auto_alloc(two_live_on_the_same_bytes.fn)
    a = np.linspace(-1, 1, 128 * 64, dtype=np.float32).reshape(128, 64)
    got = nki.simulate_kernel(forced, a)
    want = a + np.exp(a)
    assert np.all(np.abs(got - want) <= 4 * U32 * np.abs(want) + 1e-6)
    constructs = {c for _, _, c, _ in forced.migration_report()}
    assert "@nki.compiler.force_auto_alloc" in constructs


def _placing(buffer, shape=(par_dim(128), 64), dtype=nl.float32):
    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(shape, dtype=dtype, buffer=buffer())
        t[...] = nl.load(a)
        nl.store(out, value=t)
        return out

    return kernel


@pytest.mark.parametrize("buffer, shape, message", [
    (lambda: ncc.sbuf.mod_alloc(base_addr=229376 - 128), (par_dim(128), 64),
     r"allocated at line \d+ \(256 bytes per partition\) placed at byte 229248 reaches byte 229504, past "
     r"the 229376 bytes of a NeuronCore-v3 SBUF partition"),
    (lambda: ncc.sbuf.mod_alloc(base_addr=2), (par_dim(128), 64),
     "starts at byte 2, not a multiple of sbuf_min_align = 4"),
    (lambda: ncc.sbuf.alloc(lambda idx, pdim_size, fdim_size: (32, 0)), (par_dim(128), 64),
     "allocated at line \\d+ of 128 partitions starts at partition 32; a tile of 128 "
     "partitions may start at 0"),
    (lambda: ncc.sbuf.alloc(lambda idx, pdim_size, fdim_size: (0,)), (par_dim(128), 64),
     r"expected \(start_partition, byte_addr\) integers"),
    (lambda: ncc.psum.mod_alloc(base_bank=8), (par_dim(128), 64),
     "is placed in PSUM bank 8; a NeuronCore has banks 0..7"),
    (lambda: ncc.psum.mod_alloc(base_bank=0), (par_dim(128), 1024),
     "4096 bytes per partition.*past a PSUM bank's 2048 bytes per partition"),
])
def test_placements_outside_the_hardware_are_refused_by_name(buffer, shape, message):
    k = _placing(buffer, shape)
    with pytest.raises(nki.NkiError, match=message):
        nki.simulate_kernel(k, np.zeros((128, shape[1]), np.float32))


def test_a_small_tile_may_start_at_a_quarter_partition():
    k = _placing(lambda: ncc.sbuf.alloc(lambda idx, pdim_size, fdim_size: (96, 0)),
                 (par_dim(32), 16))
    a = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    np.testing.assert_array_equal(nki.simulate_kernel(k, a), a)


@nki.jit
def blocked_matmul(a_t, b):
    """out = a_t.T @ b with K in 128-row chunks accumulated into PSUM tiles placed by a
    function bound with functools.partial (called by keyword), one bank per output block."""
    K, M = a_t.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)

    def bank_of(bank_map, idx, pdim_size, fdim_size):
        return (bank_map[idx], 0, 0)

    acc = nl.ndarray((2, par_dim(M), N // 2), dtype=nl.float32,
                     buffer=ncc.psum.alloc(functools.partial(bank_of, bank_map={(0,): 3, (1,): 5})))
    for j in nl.affine_range(2):
        for k in nl.affine_range(K // 128):
            acc[j] += nisa.nc_matmul(nl.load(a_t[k * 128:(k + 1) * 128, :]),
                                     nl.load(b[k * 128:(k + 1) * 128, j * (N // 2):(j + 1) * (N // 2)]))
        nl.store(out[:, j * (N // 2):(j + 1) * (N // 2)], value=nl.copy(acc[j]))
    return out


def test_psum_placement_by_function_and_accumulation_into_a_fresh_tile():
    rng = np.random.default_rng(2)
    a_t = rng.standard_normal((256, 64), dtype=np.float32)
    b = rng.standard_normal((256, 128), dtype=np.float32)
    got = nki.simulate_kernel(blocked_matmul, a_t, b)
    a64, b64 = a_t.astype(np.float64), b.astype(np.float64)
    # FP32 accumulation over K = 256: |error| <= K u sum |a||b| (the PSUM tiles start with the
    # first matmul's result: nothing of their poisoned fresh state is read).
    bound = 256 * U32 * (np.abs(a64).T @ np.abs(b64))
    assert np.all(np.abs(got - a64.T @ b64) <= bound)
    constructs = {c for _, _, c, _ in blocked_matmul.migration_report()}
    assert {"ncc.psum.alloc(func)",
            "psum_tile += nc_matmul(...) into a PSUM tile nothing wrote"} <= constructs


def allocate_in_a_loop(loop):
    """Each iteration allocates a [128, 16384]-float32 tile at a base address the kernel advances
    in Python. AWS's tracer traces an affine_range body once (one allocation); static_range
    unrolls (one allocation per iteration, here past the partition by the fourth)."""

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        base = 0
        for i in loop(4):
            t = nl.ndarray((par_dim(128), 16384), dtype=nl.float32,
                           buffer=ncc.sbuf.mod_alloc(base_addr=base))
            base += 16384 * 4
            t[...] = nl.load(a[i])
            nl.store(out[i], value=nl.multiply(t, 2.0))
        return out

    return kernel


def test_an_affine_loop_body_allocates_once_a_static_loop_per_iteration():
    a = np.random.default_rng(4).standard_normal((4, 128, 16384), dtype=np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(allocate_in_a_loop(nl.affine_range), a),
                                  2 * a)
    with pytest.raises(nki.NkiError, match="placed at byte 196608 reaches byte 262144, past"):
        nki.simulate_kernel(allocate_in_a_loop(nl.static_range), a)


@nki.jit
def identity_from_constant(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    eye = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=nl.float32)
    nl.store(out, value=nl.load(eye))
    return out


def test_shared_constant_takes_a_dtype():
    got = nki.simulate_kernel(identity_from_constant, np.zeros((128, 128), np.float32))
    np.testing.assert_array_equal(got, np.identity(128, dtype=np.float32))
    constructs = {c for _, _, c, _ in identity_from_constant.migration_report()}
    assert "nl.shared_constant(constant, dtype=...)" in constructs


@nki.jit
def sum_twice_over_one_loop(a):
    out = nl.ndarray((128, a.shape[2]), dtype=a.dtype, buffer=nl.shared_hbm)
    blocks = nl.affine_range(a.shape[0])  # iterated twice below, like the range it stands for
    acc = nl.zeros((128, a.shape[2]), nl.float32)
    for i in blocks:
        acc[...] = nl.add(acc, nl.load(a[i]))
    for i in blocks:
        acc[...] = nl.add(acc, nl.load(a[i]))
    nl.store(out, value=acc)
    return out


def test_a_loop_object_iterates_more_than_once():
    a = np.arange(3 * 128 * 4, dtype=np.float32).reshape(3, 128, 4)
    np.testing.assert_array_equal(nki.simulate_kernel(sum_twice_over_one_loop, a), 2 * a.sum(0))
