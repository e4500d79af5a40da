"""Tensor indirection (NkiTensor.indirect, NeuronCore-v4): compute instructions gathering and
scattering columns of on-chip tensors at uint16 offsets read when they run, against a NumPy
reading of AWS's NKI 0.6 stub (offset i of partition group g at index[g * G + i % G, i // G],
G = 16 on Vector / Scalar / GpSimd, 32 on the Tensor engine), and every refusal."""

import numpy as np
import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl

P, F, K, N = 32, 64, 2, 32


def offsets(index, n, group):
    """Per partition p, the n free-dim offsets its group reads (the stub's snake)."""
    p = index.shape[0]
    return np.array([[index[q // group * group + i % group, i // group] for i in range(n)]
                     for q in range(p)])


def _load(src, dtype=None, memory=nl.sbuf):
    t = nl.ndarray(src.shape, dtype or src.dtype, buffer=memory)
    nisa.dma_copy(dst=t, src=src)
    return t


def _store(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit(platform_target="trn3")
def gather_tensor_tensor(data, index, b):
    o = nl.ndarray((P, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=o, data1=_load(data).indirect(_load(index), num_elem=N),
                       data2=_load(b), op=nl.add)
    return _store(o)


@nki.jit(platform_target="trn3")
def gather_activation(data, index):
    o = nl.ndarray((P, N), nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=o, op=nl.exp, data=_load(data).indirect(_load(index), num_elem=N),
                    scale=0.5)
    return _store(o)


@nki.jit(platform_target="trn3")
def gather_copy(data, index):
    o = nl.ndarray((P, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=_load(data).indirect(_load(index), num_elem=N))
    return _store(o)


@nki.jit(platform_target="trn3")
def scatter_activation(data, index, src):
    d = _load(data)
    nisa.activation(dst=d.indirect(_load(index), num_elem=N), op=nl.exp, data=_load(src))
    return _store(d)


@nki.jit(platform_target="trn3")
def gather_matmul(stationary, moving, index):
    # stationary [K=128, M=64] gathered along its free dim by offsets of groups of 32.
    s = _load(stationary, nl.bfloat16)
    m = _load(moving, nl.bfloat16)
    psum = nl.ndarray((32, moving.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=psum, stationary=s.indirect(_load(index), num_elem=32), moving=m)
    o = nl.ndarray(psum.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=psum)
    return _store(o)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((P, F)).astype(np.float32)
    index = rng.integers(0, F, (P, K)).astype(np.uint16)
    return rng, data, index


def test_gather_into_tensor_tensor():
    rng, data, index = _data()
    b = rng.standard_normal((P, N)).astype(np.float32)
    ref = np.take_along_axis(data, offsets(index, N, 16), 1) + b
    np.testing.assert_array_equal(gather_tensor_tensor(data, index, b), ref)


def test_gather_into_activation():
    _, data, index = _data(1)
    ref = np.exp(np.take_along_axis(data, offsets(index, N, 16), 1) * np.float32(0.5))
    # exp in FP32 on the host: a few ulp between libm implementations.
    np.testing.assert_allclose(gather_activation(data, index), ref,
                               rtol=4 * np.finfo(np.float32).eps)


def test_gather_into_tensor_copy_is_exact():
    _, data, index = _data(2)
    np.testing.assert_array_equal(gather_copy(data, index),
                                  np.take_along_axis(data, offsets(index, N, 16), 1))


def test_scatter_from_dst_repeated_offsets_last_wins():
    rng, data, _ = _data(3)
    # Few distinct offsets: each repeats within a partition; the last element written stays.
    index = rng.integers(0, 5, (P, K)).astype(np.uint16)
    src = rng.standard_normal((P, N)).astype(np.float32)
    ref = data.copy()
    e = np.exp(src)
    off = offsets(index, N, 16)
    for q in range(P):
        for i in range(N):
            ref[q, off[q, i]] = e[q, i]
    np.testing.assert_allclose(scatter_activation(data, index, src), ref,
                               rtol=4 * np.finfo(np.float32).eps)
    untouched = np.ones_like(data, dtype=bool)
    for q in range(P):
        untouched[q, off[q]] = False
    np.testing.assert_array_equal(scatter_activation(data, index, src)[untouched], data[untouched])


def test_matmul_stationary_gathered_in_groups_of_32():
    rng = np.random.default_rng(4)
    stationary = rng.standard_normal((128, 64)).astype(np.float32)
    moving = rng.standard_normal((128, 16)).astype(np.float32)
    index = rng.integers(0, 64, (128, 1)).astype(np.uint16)
    # The engine reads bf16: round the operands as it does, then multiply exactly.
    s_bf = torch.tensor(stationary).bfloat16().double().numpy()
    m_bf = torch.tensor(moving).bfloat16().double().numpy()
    cols = offsets(index, 32, 32)  # [128, 32]: partition k's 32 offsets (its group of 32)
    gathered = np.take_along_axis(s_bf, cols, 1)  # [K=128, M=32]
    ref = gathered.T @ m_bf
    got = gather_matmul(stationary, moving, index)
    # Exact bf16 products summed in FP32 over K = 128: at most K roundings of the running sum.
    bound = 128 * np.finfo(np.float32).eps * (np.abs(gathered.T) @ np.abs(m_bf))
    assert np.all(np.abs(got - ref) <= bound)


@nki.jit(platform_target="trn3")
def scatter_predicated(data, index, src, pred):
    d = _load(data)
    nisa.tensor_copy_predicated(dst=d.indirect(_load(index), num_elem=N), src=_load(src),
                                predicate=_load(pred))
    return _store(d)


def test_predicated_copy_into_scattered_dst_keeps_unselected_columns():
    rng, data, _ = _data(5)
    # Distinct offsets within each group (its 32 from one permutation), so that the reference
    # does not depend on the order of repeated offsets.
    index = np.zeros((P, K), np.uint16)
    for g in range(P // 16):
        index[g * 16:(g + 1) * 16] = rng.permutation(F)[:32].reshape(2, 16).T
    src = rng.standard_normal((P, N)).astype(np.float32)
    pred = rng.integers(0, 2, (P, N)).astype(np.uint8)
    ref = data.copy()
    off = offsets(index, N, 16)
    for q in range(P):
        for i in range(N):
            if pred[q, i]:
                ref[q, off[q, i]] = src[q, i]
    np.testing.assert_array_equal(scatter_predicated(data, index, src, pred), ref)


def test_staged_columns_take_no_sbuf_capacity():
    # The data, index, output and a filler use SBUF to the last byte: the gather's staging must
    # not push anything out (a spill would warn).
    rng, data, index = _data(6)

    @nki.jit(platform_target="trn3")
    def full(data, index):
        d, ix = _load(data), _load(index)
        o = nl.ndarray((P, N), nl.float32, buffer=nl.sbuf)
        left = nl.tile_size.total_available_sbuf_size - 4 * F - 2 * K - 4 * N
        filler = nl.ndarray((P, left), nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=filler, value=0)
        nisa.memset(dst=o, value=0)
        nisa.tensor_copy(dst=o, src=d.indirect(ix, num_elem=N))
        # Every tile stays live across the gather: read or written after it.
        nisa.tensor_copy(dst=d[:, 0:N], src=o)
        nisa.tensor_copy(dst=filler[:, 0:K], src=ix)
        return _store(o)

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", nki.NkiSpillWarning)
        got = full(data, index)
    np.testing.assert_array_equal(got, np.take_along_axis(data, offsets(index, N, 16), 1))


# -- refusals


def _error(kernel, *args, match):
    with pytest.raises(nki.NkiError, match=match):
        kernel(*args)


def test_refused_below_neuroncore_v4():
    @nki.jit(platform_target="trn2")
    def k(data, index):
        o = nl.ndarray((P, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=_load(data).indirect(_load(index), num_elem=N))
        return _store(o)

    _, data, index = _data()
    _error(k, data, index, match="NeuronCore-v4.*NEURON_PLATFORM_TARGET_OVERRIDE=trn3")


@pytest.mark.parametrize("case,match", [
    ("int32 index", "offsets are uint16"),
    ("hbm index", "SBUF tensor of uint16"),
    ("partitions", r"\(P, K\) with P = 32"),
    ("num_elem", r"num_elem=65 must be in \[1, index.size = 64\]"),
    ("group", "holds 16 x 2 of them"),
    ("hbm data", "must be in SBUF or PSUM"),
])
def test_refused_views(case, match):
    @nki.jit(platform_target="trn3")
    def k(data, index):
        d = _load(data)
        if case == "int32 index":
            ix = _load(index, nl.int32)
        elif case == "partitions":
            ix = _load(index[0:16])
        elif case == "hbm index":
            ix = index
        else:
            ix = _load(index)
        n = {"num_elem": 65, "group": 64}.get(case, N)
        src = data if case == "hbm data" else d
        o = nl.ndarray((P, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=src.indirect(ix, num_elem=n))
        return _store(o)

    _, data, index = _data()
    _error(k, data, index, match=match)


def test_offset_outside_the_data_is_an_error_naming_it():
    _, data, index = _data()
    index[17, 1] = F  # partition group 1, offset 17 = index[16 + 1, 1]
    with pytest.raises(nki.NkiError, match=r"offset 64 \(index row 17, column 1, element 17 of "
                                        r"partition 16\).*64 elements per partition"):
        gather_copy(data, index)


def test_operand_and_engine_rules():
    @nki.jit(platform_target="trn3")
    def data2(data, index, b):
        o = nl.ndarray((P, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o, data1=_load(b), data2=_load(data).indirect(_load(index),
                                                                             num_elem=N),
                           op=nl.add)
        return _store(o)

    @nki.jit(platform_target="trn3")
    def gpsimd_copy(data, index):
        o = nl.ndarray((P, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=_load(data).indirect(_load(index), num_elem=N),
                         engine=nisa.gpsimd_engine)
        return _store(o)

    @nki.jit(platform_target="trn3")
    def fp32_matmul(data, index, b):
        psum = nl.ndarray((N, N), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=psum, stationary=_load(data).indirect(_load(index), num_elem=N),
                       moving=_load(b))
        return _store(_load(psum))

    @nki.jit(platform_target="trn3")
    def select_on_false(data, index, b):
        o = nl.ndarray((P, N), nl.float32, buffer=nl.sbuf)
        bb = _load(b)
        nisa.select(dst=o, predicate=bb, on_true=bb,
                    on_false=_load(data).indirect(_load(index), num_elem=N))
        return _store(o)

    @nki.jit(platform_target="trn3")
    def index_off_quadrant(data, index):
        o = nl.ndarray((16, N), nl.float32, buffer=nl.sbuf)
        ix = _load(index)
        nisa.tensor_copy(dst=o, src=_load(data)[16:32].indirect(ix[16:32], num_elem=N))
        return _store(o)

    rng, data, index = _data()
    b = rng.standard_normal((P, N)).astype(np.float32)
    _error(data2, data, index, b, match="not documented for this operand")
    _error(select_on_false, data, index, b, match="not documented for this operand")
    _error(index_off_quadrant, data, index, match="starts on partition 16; it must start on a "
                                                  "quadrant boundary")
    _error(gpsimd_copy, data, index, match="runs on the vector / scalar engine, not gpsimd")
    _error(fp32_matmul, data, index, b, match="indirect operands must be float16")


def test_timing_is_the_instruction_alone():
    _, data, index = _data()

    @nki.jit(platform_target="trn3")
    def plain(data, index):
        o = nl.ndarray((P, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=_load(data)[:, 0:N])
        _load(index)
        return _store(o)

    gather_copy(data, index)
    plain(data, index)
    a, b = gather_copy.last_run, plain.last_run
    # The same instructions on the same engines for the same busy time: no hidden copy.
    assert a.instructions == b.instructions
    assert a.busy_ns == b.busy_ns
