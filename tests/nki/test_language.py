"""The nki language on the runtime's interpreter: results against NumPy / torch on the same inputs
(tolerances derived from the dtype and the accumulation order), storage rounding, poisoned fresh
memory, SPMD grids, device_print, and neuron tensors as one launch record."""

import numpy as np
import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl
import torch_neuronx

U32 = np.finfo(np.float32).eps / 2  # unit roundoff of float32


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


@nki.jit
def matmul_kernel(lhsT, rhs):
    k_total, m_total = lhsT.shape
    _, n_total = rhs.shape
    result = nl.ndarray((m_total, n_total), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in range(m_total // 128):
        for n in range(n_total // 512):
            acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in range(k_total // 128):
                lt = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                rt = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=rt, src=rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                nisa.nc_matmul(dst=acc, stationary=lt, moving=rt)
            sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=sb, src=acc)
            nisa.dma_copy(dst=result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=sb)
    return result


def test_add_numpy_exact():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 300), dtype=np.float32)
    b = rng.standard_normal((128, 300), dtype=np.float32)
    np.testing.assert_array_equal(add_kernel(a, b), a + b)  # one FP32 rounding, as NumPy's


def test_matmul_within_fp32_accumulation_bound():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((256, 128), dtype=np.float32)
    b = rng.standard_normal((256, 512), dtype=np.float32)
    out = matmul_kernel(a, b)
    ref = a.astype(np.float64).T @ b.astype(np.float64)
    # Any summation order of K products in FP32: |error| <= K u sum|a||b| (plus the products' u).
    bound = (a.shape[0] + 1) * U32 * (np.abs(a).T.astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(out - ref) <= bound)


def test_matmul_bf16_inputs_accumulate_in_fp32():
    rng = np.random.default_rng(2)
    a = torch.from_numpy(rng.standard_normal((256, 128), dtype=np.float32)).bfloat16()
    b = torch.from_numpy(rng.standard_normal((256, 512), dtype=np.float32)).bfloat16()
    out = matmul_kernel(a, b)
    assert out.dtype == torch.float32
    ref = a.double().T @ b.double()  # bf16 products are exact in FP32; only the sums round
    bound = (a.shape[0] + 1) * U32 * (a.double().abs().T @ b.double().abs())
    assert torch.all((out.double() - ref).abs() <= bound)


@nki.jit
def softmax_kernel(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.softmax(nl.load(x), axis=1))
    return out


def test_softmax_fp32_and_bf16():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 200), dtype=np.float32) * 4
    ref = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    out = softmax_kernel(x)
    # exp, sum of F terms, reciprocal and product in FP32: relative error <= (F + 6) u.
    assert np.all(np.abs(out - ref) <= (x.shape[1] + 6) * U32 * ref)
    xb = torch.from_numpy(x).bfloat16()
    outb = softmax_kernel(xb)
    refb = torch.softmax(xb.double(), dim=1)
    # Stored as bf16 once: half a bf16 ulp (2^-8 relative) on top of the FP32 error.
    assert torch.all((outb.double() - refb).abs() <= (2.0**-8 + (200 + 6) * U32) * refb)


@nki.jit
def rmsnorm_kernel(x, w):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    wt = nl.load(w)
    for i in range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], nl.rms_norm(t, wt, axis=1, epsilon=1e-5))
    return out


def test_rms_norm_against_torch():
    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.standard_normal((256, 64), dtype=np.float32))
    w = torch.from_numpy(rng.standard_normal((1, 64), dtype=np.float32))
    out = rmsnorm_kernel(x, w)
    ref = x.double() * torch.rsqrt(x.double().pow(2).mean(1, keepdim=True) + 1e-5) * w.double()
    # Sum of F squares, rsqrt, two products in FP32: relative error <= (F + 8) u.
    assert torch.all((out.double() - ref).abs() <= (64 + 8) * U32 * ref.abs() + 1e-30)


@nki.jit
def isa_mix_kernel(x):
    p, f = x.shape
    out = nl.ndarray((p, f), nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((p, 1), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    idx = nl.ndarray((p, f), nl.float32, buffer=nl.sbuf)
    nisa.iota(idx, [[1, f]], offset=0, channel_multiplier=f)  # p * f + j
    a = nl.ndarray((p, f), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(a, t, nl.multiply, 2.0, op1=nl.subtract, operand1=1.0, reverse1=True)
    b = nl.ndarray((p, f), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(b, a, idx, nl.maximum)
    m = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(m, nl.max, b, axis=1, negate=True)
    e = nl.ndarray((p, f), nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(e, nl.exp, b, bias=m, scale=1.0, reduce_op=nl.add, reduce_res=s)
    nl.store(out, nl.where(nl.greater(b, 3.0), e, -1.0))
    nl.store(red, s)
    return out, red


def test_isa_instructions_against_numpy():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 8), dtype=np.float32) * 20
    out, red = isa_mix_kernel(x)
    idx = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    a = 1.0 - x * 2.0  # reverse1: operand1 - (x * 2)
    b = np.maximum(a, idx)
    arg = b.astype(np.float64) - b.max(1, keepdims=True)
    e = np.exp(arg)
    # The FP32 argument carries a rounding of |arg| u, which exp turns into a relative |arg| u;
    # exp itself and the store add a few u more.
    tol = (np.abs(arg) + 4) * U32 * e
    assert np.all(np.abs(out - np.where(b > 3.0, e, -1.0)) <= np.where(b > 3.0, tol, 0))
    assert np.all(np.abs(red[:, 0] - e.sum(1)) <= tol.sum(1) + 8 * U32 * e.sum(1))


@nki.jit
def cast_kernel(x, dtype_name):
    out = nl.ndarray(x.shape, getattr(nl, dtype_name), buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nl.copy(t, dtype=getattr(nl, dtype_name)))
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn,
                                   torch.float8_e5m2])
def test_stores_round_like_torch(dtype):
    # Round-to-nearest-even on write, overflow per the format (inf, or NaN for e4m3fn); values
    # include ties, subnormals and overflow.
    x = torch.cat([torch.randn(128, 60) * 100, torch.tensor([[0.0, -0.0, 1e-7, 3.0e-5, 65504.0,
                   70000.0, 449.0, 1.0 + 2.0**-8]]).expand(128, 8)], dim=1)
    name = str(dtype).replace("torch.", "")
    out = cast_kernel(x, name)
    ref = x.to(dtype)
    assert out.dtype == dtype
    assert torch.equal(out.float().nan_to_num(123.0), ref.float().nan_to_num(123.0))


@nki.jit
def uninitialised_kernel(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    half = x.shape[1] // 2
    nisa.dma_copy(dst=t[:, :half], src=x[:, :half])  # the right half is never written
    nl.store(out, t)
    return out


def test_fresh_memory_is_poisoned():
    x = np.ones((4, 8), dtype=np.float32)
    out = uninitialised_kernel(x)
    assert np.all(out[:, :4] == 1.0)
    assert np.all(np.isnan(out[:, 4:]))


@nki.jit
def reused_storage_kernel(x):
    first = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    second = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)  # written whole by its first instruction
    nl.store(first, a)
    b = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)  # may take a's storage after a's last use
    half = x.shape[1] // 2
    nisa.dma_copy(dst=b[:, :half], src=x[:, :half])
    nl.store(second, b)
    return first, second


def test_only_tiles_written_whole_first_skip_poisoning():
    # A tile that its first instruction writes whole needs no poison; one written in part still
    # shows NaN where it was not written, even in storage an earlier tile used.
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    first, second = reused_storage_kernel(x)
    np.testing.assert_array_equal(first, x)
    np.testing.assert_array_equal(second[:, :4], x[:, :4])
    assert np.all(np.isnan(second[:, 4:]))


@nki.jit
def write_argument_kernel(x, out):
    nl.store(out, nl.multiply(nl.load(x), 2.0))


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_kernel_writes_an_argument_tensor(layout):
    # The kernel runs on the argument's own memory when it is contiguous, on a contiguous copy
    # (written back) when it is not.
    x = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    out = torch.zeros(4, 8) if layout == "contiguous" else torch.zeros(8, 4).t()
    write_argument_kernel(x, out)
    torch.testing.assert_close(out, 2 * x, rtol=0, atol=0)


@nki.jit
def spmd_kernel(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    rows = x.shape[0] // nl.num_programs(0)
    i = nl.program_id(0)
    t = nl.load(x[i * rows:(i + 1) * rows, :])
    nl.store(out[i * rows:(i + 1) * rows, :], nl.multiply(t, float(i + 1)))
    return out


def test_spmd_grid_programs_share_outputs_and_run_in_parallel():
    x = np.ones((256, 64), dtype=np.float32)
    out = spmd_kernel[2](x)
    np.testing.assert_array_equal(out[:128], 1.0)
    np.testing.assert_array_equal(out[128:], 2.0)
    two = spmd_kernel.last_run
    spmd_kernel[1](x[:128])
    one = spmd_kernel.last_run
    # Each program has its own engines: twice the work, the same modelled time.
    assert two.busy_ns["vector"] == pytest.approx(2 * one.busy_ns["vector"])
    assert two.makespan_ns == pytest.approx(one.makespan_ns)


@nki.jit
def print_kernel(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.device_print("tile", t)
    nl.store(out, t)
    return out


def test_device_print(capsys):
    print_kernel(np.arange(4, dtype=np.float32).reshape(2, 2))
    assert "tile [2, 2]: 0 1 2 3" in capsys.readouterr().out


@nki.jit
def inplace_kernel(x):
    t = nl.load(x)
    nl.store(x, nl.multiply(t, 3.0))


def test_kernel_writing_its_input_updates_it():
    x = np.ones((8, 8), dtype=np.float32)
    assert inplace_kernel(x) is None
    np.testing.assert_array_equal(x, 3.0)
    xt = torch.ones(8, 8, device="neuron")
    inplace_kernel(xt)
    assert torch.equal(xt.cpu(), torch.full((8, 8), 3.0))


def test_neuron_tensors_one_launch_record():
    rng = np.random.default_rng(6)
    a = torch.from_numpy(rng.standard_normal((256, 128), dtype=np.float32)).bfloat16()
    b = torch.from_numpy(rng.standard_normal((256, 512), dtype=np.float32)).bfloat16()
    an, bn = a.to("neuron"), b.to("neuron")
    torch_neuronx.clear_kernel_trace()
    out = matmul_kernel(an, bn)
    assert out.device.type == "neuron"
    assert torch.equal(out.cpu(), matmul_kernel(a, b))  # same interpreter, same bits
    rows = [r for r in torch_neuronx.kernel_trace() if r["op"] == "nki::matmul_kernel"]
    assert len(rows) == 1 and rows[0]["launches"] == 1 and rows[0]["kind"] == "nki_kernel"
    run = matmul_kernel.last_run
    assert rows[0]["flops"] == run.matmul_flops == 2 * 256 * 128 * 512
    # The record's modelled time is the launch's fixed cost plus the kernel's timeline.
    launch_ns = torch_neuronx.core_model()["kernel_launch_ns"]
    assert rows[0]["sim_ns"] == pytest.approx(launch_ns + run.makespan_ns)


def test_bad_arguments_are_named():
    with pytest.raises(nki.NkiError, match="mix of NumPy arrays and torch tensors"):
        add_kernel(np.ones((2, 2), np.float32), torch.ones(2, 2))
    with pytest.raises(nki.NkiError, match="not supported by NeuronCores.*cast to float32"):
        add_kernel(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(nki.NkiError, match="only valid inside a kernel"):
        nl.ndarray((2, 2), nl.float32)


def test_simulate_runs_on_the_host_whatever_the_device():
    x = torch.arange(8.0).reshape(2, 4)
    out = nki.simulate(add_kernel)(x.to("neuron"), x.to("neuron"))
    assert out.device.type == "cpu" and torch.equal(out, x + x)
    with pytest.raises(nki.NkiError, match="not available in NKI 0.x"):
        nki.benchmark(add_kernel)
