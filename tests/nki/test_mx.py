"""MX (microscaling) on NeuronCore-v4: quantize_mx's documented scales and rounding, and
nc_matmul_mx's dequantising matmul, against an independent NumPy / torch reading of AWS's API
documentation (nki.isa.quantize_mx, nki.isa.nc_matmul_mx, the Trainium3 architecture guide)."""

import numpy as np
import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl

U32 = np.finfo(np.float32).eps / 2


@nki.jit(platform_target="trn3")
def quantize(src):
    p, f = src.shape
    data = nl.ndarray((p, f // 4), nl.uint32, buffer=nl.shared_hbm)
    scales = nl.ndarray((p, f // 4), nl.uint8, buffer=nl.shared_hbm)
    x = nl.load(src)
    q = nl.ndarray((p, f // 4), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    s = nl.zeros((p, f // 4), nl.uint8)
    nisa.quantize_mx(dst=q, src=x, dst_scale=s)
    nl.store(data, q.view(nl.uint32))
    nl.store(scales, s)
    return data, scales


def _reference_quantize(x):
    """Groups of 8 partitions x 4 values; X = 2^(floor(log2 amax) - (8 - 1)) for e4m3fn."""
    p, f = x.shape
    x = x.float()
    groups = x.reshape(p // 8, 8, f // 4, 4).abs().amax(dim=(1, 3))  # [p/8, f/4]
    e = torch.floor(torch.log2(groups)) - 7
    e = torch.where(groups == 0, torch.full_like(e, -127), e)
    scale = torch.pow(2.0, e).repeat_interleave(8, 0).repeat_interleave(4, 1)
    codes = (x / scale).to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int64)
    words = (codes.reshape(p, f // 4, 4) << torch.tensor([0, 8, 16, 24])).sum(-1)
    bytes_ = torch.zeros(p, f // 4, dtype=torch.int64)
    for b in range(p // 8):
        bytes_[(b // 4) * 32 + b % 4] = (e[b] + 127).to(torch.int64)
    return words.numpy().astype(np.uint32), bytes_.numpy().astype(np.uint8)


def test_quantize_mx_scales_and_rounding():
    torch.manual_seed(0)
    x = (torch.randn(64, 32) * torch.logspace(-3, 3, 32)).to(torch.bfloat16)
    x[8:16, 0:4] = 0  # an all-zero group: scale 2^-127
    data, scales = nki.simulate(quantize)(x)
    ref_data, ref_scales = _reference_quantize(x)
    np.testing.assert_array_equal(data.numpy().view(np.uint32), ref_data)
    np.testing.assert_array_equal(scales.numpy(), ref_scales)


@nki.jit(platform_target="trn3")
def mx_matmul(st, mv, st_scale, mv_scale):
    out = nl.ndarray((st.shape[1], mv.shape[1]), nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray(st.shape, nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    b = nl.ndarray(mv.shape, nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=st.view(nl.float8_e4m3fn_x4))
    nisa.dma_copy(dst=b, src=mv.view(nl.float8_e4m3fn_x4))
    sa, sb = nl.load(st_scale), nl.load(mv_scale)
    acc = nl.ndarray((st.shape[1], mv.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=a, moving=b, stationary_scale=sa, moving_scale=sb)
    nl.store(out, nl.copy(acc))
    return out


def _unpack(words):
    codes = torch.from_numpy(words.astype(np.int64))
    b = torch.stack([(codes >> (8 * t)) & 0xFF for t in range(4)], -1).to(torch.uint8)
    return b.view(torch.float8_e4m3fn).float()  # [k, f, 4]


def test_nc_matmul_mx_dequantises_each_group():
    rng = np.random.default_rng(1)
    k, m, n = 64, 8, 16
    # Finite e4m3fn codes (not 0x7f / 0xff, the NaNs).
    st = rng.integers(0, 0x7e, (k, m, 4)) | (rng.integers(0, 2, (k, m, 4)) << 7)
    mv = rng.integers(0, 0x7e, (k, n, 4)) | (rng.integers(0, 2, (k, n, 4)) << 7)
    pack = lambda c: (c << np.array([0, 8, 16, 24])).sum(-1).astype(np.uint32)  # noqa: E731
    st_w, mv_w = pack(st), pack(mv)
    rows = (k - 1) // 32 * 32 + 4
    st_scale = rng.integers(120, 134, (rows, m)).astype(np.uint8)
    mv_scale = rng.integers(120, 134, (rows, n)).astype(np.uint8)
    out = nki.simulate(mx_matmul)(st_w, mv_w, st_scale, mv_scale)
    # Scale row of data partition r: (r // 32) * 32 + (r % 32) // 8.
    srow = np.array([(r // 32) * 32 + (r % 32) // 8 for r in range(k)])
    a = _unpack(st_w).numpy().astype(np.float64) * 2.0 ** (st_scale[srow].astype(np.float64) - 127)[:, :, None]
    b = _unpack(mv_w).numpy().astype(np.float64) * 2.0 ** (mv_scale[srow].astype(np.float64) - 127)[:, :, None]
    ref = np.einsum("kiq,kjq->ij", a, b)
    bound = (4 * k + 1) * U32 * np.einsum("kiq,kjq->ij", np.abs(a), np.abs(b))
    assert np.all(np.abs(out - ref) <= bound)


def test_mx_needs_neuroncore_v4_and_x4_operands():
    @nki.jit(platform_target="trn2")
    def k(src):
        q = nl.ndarray((32, 8), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        s = nl.ndarray((32, 8), nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q, src=nl.load(src), dst_scale=s)
        return src

    with pytest.raises(nki.NkiError, match="needs NeuronCore-v4"):
        nki.simulate(k)(torch.zeros(32, 32, dtype=torch.bfloat16))

    @nki.jit(platform_target="trn3")
    def k2(src):
        q = nl.ndarray((32, 8), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=q, data=q, op0=nl.add, operand0=1.0)
        return src

    with pytest.raises(nki.NkiError, match="MX x4 tensors"):
        nki.simulate(k2)(torch.zeros(32, 32, dtype=torch.bfloat16))


def test_packed_mx_dtypes_have_no_numpy_dtype_and_say_to_pass_torch_tensors():
    # NumPy has no dtype of four packed values (ml_dtypes neither): the error must not send the
    # user to install ml_dtypes, but to torch tensors, which carry these dtypes.
    for dt in (nl.float8_e4m3fn_x4, nl.float8_e5m2_x4, nl.float4_e2m1fn_x4):
        with pytest.raises(nki.NkiError, match="pass torch tensors") as info:
            dt.dtype
        assert "install ml_dtypes" not in str(info.value)
