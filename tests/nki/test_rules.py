"""Hardware rules checked while a kernel specialises: each error names the rule, the numbers and
the kernel's own file:line."""

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

HERE = __file__


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn.fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def _raises(kernel, text, *args, match):
    with pytest.raises(nki.NkiError, match=match) as info:
        kernel(*args)
    assert f"{HERE}:{_line_of(kernel, text)}" in str(info.value)
    return info.value


X = np.zeros((128, 512), np.float32)


@nki.jit
def too_many_partitions(x):
    t = nl.ndarray((256, 4), nl.float32, buffer=nl.sbuf)  # 256 partitions
    return t


def test_partition_dim_limit():
    _raises(too_many_partitions, "256 partitions", X,
            match="partition dimension 256 exceeds maximum 128")


@nki.jit
def wide_moving(x):
    a = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((128, 1024), nl.bfloat16, buffer=nl.sbuf)
    out = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(out, a, b)  # moving 1024
    return x


def test_matmul_moving_limit_per_version():
    _raises(wide_moving, "moving 1024", X, match="moving free size 1024 exceeds maximum 512")
    # NeuronCore-v4 takes up to 4096 (whole PSUM): the same kernel specialises for trn3 up to the
    # next rule it breaks (a fresh tile is read: poisoned, but legal).
    trn3 = nki.jit(wide_moving.fn, platform_target="trn3")
    trn3.specialize((X,), {})


@nki.jit
def wide_stationary(x):
    a = nl.ndarray((128, 256), nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
    out = nl.ndarray((256, 512), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(out, a, b)  # stationary 256
    return x


def test_matmul_stationary_limit():
    # The PSUM tile's 256 partitions break first; both limits are 128.
    _raises(wide_stationary, "out = nl.ndarray((256", X, match="partition dimension 256")


@nki.jit
def matmul_into_sbuf(x):
    a = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
    out = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(out, a, a)  # dst in SBUF
    return x


def test_matmul_writes_psum_only():
    _raises(matmul_into_sbuf, "dst in SBUF", X, match="nc_matmul writes PSUM; dst is in sbuf")


@nki.jit
def bf16_psum(x):
    a = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
    out = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.psum)
    nisa.nc_matmul(out, a, a)  # bf16 accumulation
    return x


def test_psum_accumulates_fp32_before_v4():
    _raises(bf16_psum, "bf16 accumulation", X, match="accumulates in float32 in PSUM")


@nki.jit
def too_many_banks(x):
    tiles = []
    for i in range(9):
        t = nl.zeros((128, 512), nl.float32, buffer=nl.psum)  # 9 live banks
        tiles.append(t)
    s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    for t in tiles:
        nisa.tensor_copy(s, t)
    return x


def test_psum_over_subscription_spills_with_a_warning():
    # AWS's compiler spills PSUM to the next tier (SBUF) rather than failing (memory hierarchy
    # overview): so does the interpreter, naming the tile, and the kernel still computes.
    with pytest.warns(nki.NkiSpillWarning, match=r"1 spill\(s\) move 524288 bytes: psum tile "
                                                 r"\(128, 512\) float32 from line \d+ to SBUF "
                                                 r"after line \d+, back before line") as w:
        too_many_banks(X)
    assert w[0].filename == HERE and w[0].lineno == _line_of(too_many_banks, "9 live banks")
    run = too_many_banks.last_run
    assert len(run.spills) == 1 and run.spills[0][1] == 2 * 128 * 512 * 4


@nki.jit
def sbuf_overflow(x):
    a = nl.zeros((128, 40000), nl.float32)
    b = nl.zeros((128, 40000), nl.float32)  # 2 x 160000 bytes per partition
    nisa.tensor_tensor(a, a, b, nl.add)
    return x


@nki.jit
def sbuf_reuse(x):
    for i in range(4):
        a = nl.zeros((128, 40000), nl.float32)  # one at a time: fits
        nisa.tensor_scalar(a, a, nl.add, 1.0)
    return x


def test_sbuf_capacity_counts_live_tiles_only():
    _raises(sbuf_overflow, "nisa.tensor_tensor(a, a, b, nl.add)", X,
            match="320000 bytes per partition of SBUF exceed the 229376 of a NeuronCore-v3 for "
                  "the tiles this instruction uses together")
    sbuf_reuse.specialize((X,), {})


@nki.jit
def compute_on_hbm(x):
    return nl.exp(x)  # x is in HBM


@nki.jit
def dma_from_psum(x):
    p = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, p)  # PSUM to HBM
    return out


@nki.jit
def both_psum(x):
    p = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    q = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(s, p, q, nl.add)  # two PSUM inputs
    return x


@nki.jit
def gpsimd_psum(x):
    p = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(s, p, engine=nisa.engine.gpsimd)  # GpSimd reads PSUM
    return x


@nki.jit
def reduce_partitions(x):
    t = nl.load(x)
    return nl.sum(t, axis=0)  # partition dim


@nki.jit
def misaligned(x):
    t = nl.load(x)
    s = nl.ndarray((48, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(s, t[16:64, :])
    b = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
    m = nl.ndarray((48, 512), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(m, b[16:64, :48], b[16:64, :])  # starts at partition 16
    return x


def test_engine_and_buffer_legality():
    _raises(compute_on_hbm, "x is in HBM", X, match="operand is in HBM; load it into SBUF")
    _raises(dma_from_psum, "PSUM to HBM", X, match="DMA does not read PSUM")
    _raises(both_psum, "two PSUM inputs", X, match="cannot both be in PSUM")
    _raises(gpsimd_psum, "GpSimd reads PSUM", X, match="GpSimd engine cannot access PSUM")
    _raises(reduce_partitions, "partition dim", X, match="only free dims")
    _raises(misaligned, "starts at partition 16", X,
            match="spans 48 partitions starting at partition 16")


def test_integer_matmul_and_64_bit_inputs():
    @nki.jit
    def int_matmul(x):
        a = nl.ndarray((128, 128), nl.int32, buffer=nl.sbuf)
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(out, a, a)
        return x

    with pytest.raises(nki.NkiError, match="no integer data path"):
        int_matmul(X)
    with pytest.raises(nki.NkiError, match="float64 is not supported"):
        int_matmul(np.zeros((4, 4)))
