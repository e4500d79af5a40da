"""The CPU fallback and op tracking: which ops fell back and which ran natively, the once-per-op
warning, results against the CPU for a spread of op kinds (native kernels and fallback alike),
real views, and the kernel trace."""

import pytest
import torch

import torch_neuronx

pytestmark = pytest.mark.filterwarnings(
    "ignore:Operator .* executed via CPU fallback", "ignore:An output with one or more elements"
)

DEV = "neuron"


def pair(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    cpu = torch.randn(*shape, generator=g).to(dtype)
    return cpu, cpu.to(DEV)


def same(neuron_result, cpu_result, exact=False):
    if isinstance(cpu_result, (tuple, list)):
        assert type(neuron_result) is type(cpu_result) or isinstance(neuron_result, (tuple, list))
        assert len(neuron_result) == len(cpu_result)
        for n, c in zip(neuron_result, cpu_result):
            same(n, c, exact)
        return
    if not isinstance(cpu_result, torch.Tensor):
        assert neuron_result == cpu_result
        return
    assert neuron_result.device.type == DEV, neuron_result.device
    assert neuron_result.dtype == cpu_result.dtype and neuron_result.shape == cpu_result.shape
    tol = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-5, "atol": 1e-6}
    torch.testing.assert_close(neuron_result.cpu(), cpu_result, equal_nan=True, **tol)


# --- tracking --------------------------------------------------------------------------------


# Ops with no native kernel, which keep going through the fallback: special functions are not on
# the transformer hot path.
def test_fallback_ops_lists_qualified_names():
    _, x = pair(4, 4)
    torch_neuronx.clear_op_tracking()
    torch.i0(x)
    torch.special.erfcx(x)
    torch.special.bessel_j0(x)
    fallbacks = torch_neuronx.get_fallback_ops()
    assert fallbacks == ["aten::i0.out", "aten::special_erfcx.out", "aten::special_bessel_j0.out"]
    # Repeats are listed once, in first-seen order.
    torch.i0(x)
    torch.special.i1(x)
    assert torch_neuronx.get_fallback_ops() == fallbacks + ["aten::special_i1.out"]


def test_executed_ops_has_native_kernels_and_fallbacks():
    torch_neuronx.clear_op_tracking()
    x = torch.randn(8, device=DEV)
    x.to(torch.float16)  # a dtype-converting copy: native
    torch.exp(x)  # native
    torch.special.ndtri(x)  # fallback
    executed = torch_neuronx.get_executed_ops()
    assert "aten::normal_" in executed
    assert "aten::_copy_from" in executed
    assert "aten::exp" in executed  # the functional form of a structured op: its own kernel
    assert "aten::special_ndtri.out" in executed
    assert executed.index("aten::normal_") < executed.index("aten::special_ndtri.out")
    fallbacks = torch_neuronx.get_fallback_ops()
    assert fallbacks == ["aten::special_ndtri.out"]
    assert "aten::normal_" not in fallbacks and "aten::_copy_from" not in fallbacks
    assert len(executed) == len(set(executed))
    assert all(op.startswith("aten::") for op in executed)


def test_executed_ops_order():
    x = torch.empty(8, device=DEV)
    torch_neuronx.clear_op_tracking()
    torch.special.ndtri(x)
    x.uniform_()
    torch.i0(x)
    x.normal_()
    x.uniform_()
    executed = torch_neuronx.get_executed_ops()
    # One list in first-execution order, native kernels and fallbacks alike (each op's launch
    # records arrive in the order they ran); the fallbacks' own copies are _copy_from.
    assert [op for op in executed if op != "aten::_copy_from"] == [
        "aten::special_ndtri.out",
        "aten::uniform_",
        "aten::i0.out",
        "aten::normal_",
    ]
    assert torch_neuronx.get_fallback_ops() == ["aten::special_ndtri.out", "aten::i0.out"]


def test_native_ops_do_not_fall_back():
    x = torch.randn(16, device=DEV)
    torch_neuronx.clear_op_tracking()
    torch.empty(3, 3, device=DEV)
    x.uniform_()
    x.bernoulli_(0.5)
    x.view(4, 4).t()[::2].unfold(0, 1, 1)
    x.as_strided((2, 2), (1, 2))
    torch.view_as_real(torch.zeros(2, dtype=torch.complex64).to(DEV))
    x.to(torch.int32)
    x.cpu()
    assert torch_neuronx.get_fallback_ops() == []
    assert {"aten::uniform_", "aten::bernoulli_.float", "aten::_copy_from"} <= set(
        torch_neuronx.get_executed_ops()
    )


def test_clear_op_tracking_empties_both():
    x = torch.randn(4, device=DEV)
    torch.special.erfcx(x)
    assert torch_neuronx.get_executed_ops() and torch_neuronx.get_fallback_ops()
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == []
    assert torch_neuronx.get_fallback_ops() == []
    # The kernel trace is an observer of its own: clearing op tracking leaves it alone.
    assert any(r["op"] == "aten::special_erfcx.out" for r in torch_neuronx.kernel_trace())
    torch_neuronx.clear_kernel_trace()
    assert torch_neuronx.kernel_trace() == []
    # Recording resumes afterwards, for ops seen before the clear too.
    torch.special.erfcx(x)
    assert torch_neuronx.get_fallback_ops() == ["aten::special_erfcx.out"]


def test_cpu_ops_are_not_tracked():
    torch_neuronx.clear_op_tracking()
    a = torch.randn(4)
    torch.sin(a) + a
    assert torch_neuronx.get_executed_ops() == [] and torch_neuronx.get_fallback_ops() == []


WARN_SCRIPT = """
import warnings
import torch, torch_neuronx
warnings.simplefilter("always")
x = torch.randn(4, device="neuron")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(3):
        torch.i0(x)
        torch.sinc(x)
    torch.i0(torch.randn(2, 2, device="neuron:1"))  # another device, same op: no new warning
    torch_neuronx.clear_op_tracking()
    torch.i0(x)  # clearing the tracking does not re-arm the warning
fallback = [w for w in caught if "CPU fallback" in str(w.message)]
for w in fallback:
    print("WARN", w.category.__name__, "|", str(w.message))
print("FALLBACKS", torch_neuronx.get_fallback_ops())
"""


def test_fallback_warns_once_per_op(python_subprocess):
    result = python_subprocess(WARN_SCRIPT)
    assert result.returncode == 0, result.stderr
    warns = [line for line in result.stdout.splitlines() if line.startswith("WARN")]
    assert len(warns) == 2, result.stdout
    assert all(line.startswith("WARN UserWarning |") for line in warns)
    assert "'aten::i0.out'" in warns[0] and "'aten::sinc.out'" in warns[1]
    for line in warns:
        assert "CPU fallback" in line and "TORCH_NEURONX_FALLBACK_WARN=0" in line
    assert "FALLBACKS ['aten::i0.out']" in result.stdout


@pytest.mark.parametrize("value", ["0", "false"])
def test_fallback_warning_can_be_silenced(python_subprocess, value):
    result = python_subprocess(WARN_SCRIPT, env={"TORCH_NEURONX_FALLBACK_WARN": value})
    assert result.returncode == 0, result.stderr
    assert "WARN" not in result.stdout
    assert "CPU fallback" not in result.stderr
    # Still tracked, only not warned about.
    assert "FALLBACKS ['aten::i0.out']" in result.stdout


# --- fallback results equal the CPU's --------------------------------------------------------


ELEMENTWISE = {
    "add_alpha": lambda a, b: torch.add(a, b, alpha=0.5),
    "sub_scalar": lambda a, b: a - 3,
    "mul_bcast": lambda a, b: a * b[0],
    "div": lambda a, b: a / (b.abs() + 1),
    "pow": lambda a, b: a.abs() ** b,
    "exp_log": lambda a, b: torch.log(torch.exp(a) + 1),
    "sigmoid": lambda a, b: torch.sigmoid(a),
    "gelu": lambda a, b: torch.nn.functional.gelu(a, approximate="tanh"),
    "clamp": lambda a, b: a.clamp(-0.5, 0.5),
    "where": lambda a, b: torch.where(a > b, a, b),
    "compare": lambda a, b: (a >= b) & (a < 1),
    "int_ops": lambda a, b: (a * 10).to(torch.int32) // 3 % 4,
    "bitwise": lambda a, b: ((a * 10).to(torch.int64) ^ 5) << 1,
    "promote_int_float": lambda a, b: (a * 10).to(torch.int32) + b,
    "nan_to_num": lambda a, b: torch.nan_to_num(a / 0.0),
    "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "complex": lambda a, b: (torch.complex(a, b) * torch.complex(b, a)).abs(),
    "bf16": lambda a, b: (a.bfloat16() * b.bfloat16()).float(),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise(name):
    op = ELEMENTWISE[name]
    (a, an), (b, bn) = pair(5, 6, seed=1), pair(5, 6, seed=2)
    same(op(an, bn), op(a, b))


REDUCTIONS = {
    "sum": lambda x: x.sum(),
    "sum_dims": lambda x: x.sum(dim=(0, 2), keepdim=True),
    "mean": lambda x: x.mean(1),
    "prod": lambda x: x.prod(2),
    "std": lambda x: x.std(dim=0, correction=0),
    "var_mean": lambda x: torch.var_mean(x, dim=1),
    "norm": lambda x: torch.linalg.vector_norm(x, ord=3, dim=-1),
    "argmax": lambda x: x.argmax(dim=1),
    "amin": lambda x: x.amin(dim=(1, 2)),
    "any_all": lambda x: ((x > 0).any(dim=0), (x > -5).all()),
    "cumsum": lambda x: x.cumsum(2),
    "logsumexp": lambda x: x.logsumexp(0),
    "count_nonzero": lambda x: torch.count_nonzero(x > 0, dim=1),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions(name):
    op = REDUCTIONS[name]
    x, xn = pair(3, 4, 5, seed=3)
    same(op(xn), op(x))


TUPLES = {
    "max_dim": lambda x: torch.max(x, dim=1),
    "min_dim_keepdim": lambda x: torch.min(x, dim=0, keepdim=True),
    "sort": lambda x: torch.sort(x, dim=-1, descending=True),
    "sort_stable": lambda x: torch.sort(x.round(), stable=True),
    "topk": lambda x: torch.topk(x, 3, dim=1),
    "kthvalue": lambda x: torch.kthvalue(x, 2, dim=0),
    "aminmax": lambda x: torch.aminmax(x, dim=1),
    "mode": lambda x: torch.mode(x.round(), dim=1),
    "unique": lambda x: torch.unique(x.round(), return_inverse=True, return_counts=True),
    "frexp": lambda x: torch.frexp(x),
    "qr": lambda x: torch.linalg.qr(x[:, :4] + 4 * torch.eye(4, device=x.device)),
    "split_sizes": lambda x: torch.split(x.clone(), [1, 2, 3], dim=1),
}


@pytest.mark.parametrize("name", list(TUPLES))
def test_ops_returning_tuples(name):
    op = TUPLES[name]
    x, xn = pair(4, 6, seed=4)
    out_n, out_c = op(xn), op(x)
    assert isinstance(out_n, tuple)
    same(tuple(out_n), tuple(out_c))
    if hasattr(out_c, "_fields"):  # named tuples keep their fields
        assert out_n._fields == out_c._fields


def test_tensor_list_inputs():
    xs = [pair(2, 3, seed=s) for s in range(3)]
    cpu = [c for c, _ in xs]
    neu = [n for _, n in xs]
    same(torch.cat(neu, dim=1), torch.cat(cpu, dim=1))
    same(torch.stack(neu), torch.stack(cpu))
    same(torch.hstack(neu), torch.hstack(cpu))
    same(torch.block_diag(*neu), torch.block_diag(*cpu))
    same(torch.cat([neu[0], torch.empty(0, device=DEV)]), torch.cat([cpu[0], torch.empty(0)]))
    same(list(torch._foreach_mul(neu, 3.0)), list(torch._foreach_mul(cpu, 3.0)))
    torch._foreach_add_(neu, neu[::-1])
    torch._foreach_add_(cpu, cpu[::-1])
    same(neu, cpu)


def test_tensor_list_rejects_mixed_devices():
    a = torch.ones(2, device="neuron:0")
    b = torch.ones(2, device="neuron:1")
    with pytest.raises(RuntimeError, match="same device.*neuron:0.*neuron:1"):
        torch.cat([a, b])


def test_matmul_family():
    (a, an), (b, bn) = pair(2, 3, 4, seed=5), pair(2, 4, 5, seed=6)
    same(an @ bn, a @ b)
    same(torch.bmm(an, bn), torch.bmm(a, b))
    same(torch.einsum("bij,bjk->bik", an, bn), torch.einsum("bij,bjk->bik", a, b))
    same(torch.addmm(an[0, :, :1], an[0], bn[0]), torch.addmm(a[0, :, :1], a[0], b[0]))
    same(an[0].t() @ an[1], a[0].t() @ a[1])  # non-contiguous inputs
    same(torch.linalg.solve(an[0, :, :3] + 3 * torch.eye(3, device=DEV), bn[0, :3]),
         torch.linalg.solve(a[0, :, :3] + 3 * torch.eye(3), b[0, :3]))


def test_inplace_ops():
    x, xn = pair(4, 5, seed=7)
    for t in (x, xn):
        t.add_(1).mul_(2)
        t.t()[1:3].clamp_(max=0.5)  # in place through a non-contiguous view
        t[:, 0].zero_()
        t.masked_fill_(t > 3, -1.0)
        t.exp_()
    same(xn, x)


def test_out_variants():
    (a, an), (b, bn) = pair(4, 4, seed=8), pair(4, 4, seed=9)
    out = torch.empty(4, 4, device=DEV)
    r = torch.mul(an, bn, out=out)
    assert r is out
    same(out, a * b)
    # An empty out is resized; a non-contiguous out is written through its strides.
    empty = torch.empty(0, device=DEV)
    torch.add(an, bn, out=empty)
    same(empty, a + b)
    base = torch.zeros(4, 4, device=DEV)
    torch.sub(an, bn, out=base.t())
    same(base.t(), a - b)
    values, indices = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.long, device=DEV)
    torch.max(an, dim=0, out=(values, indices))
    same((values, indices), tuple(torch.max(a, dim=0)))
    torch.cat([an, bn], out=empty)
    same(empty, torch.cat([a, b]))


def test_out_dtype_mismatch_matches_cpu_error():
    a = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.add(a, a, out=torch.empty(3, dtype=torch.int32, device=DEV))


def test_indexing_with_cpu_and_neuron_indices():
    x, xn = pair(5, 6, seed=10)
    idx = torch.tensor([4, 0, 0, 2])
    same(xn[idx], x[idx])
    same(xn[idx.to(DEV)], x[idx])
    same(xn[:, idx], x[:, idx])
    same(xn[idx, idx[:4] + 1], x[idx, idx[:4] + 1])
    same(xn[x > 0], x[x > 0])  # CPU bool mask
    same(xn[xn > 0], x[x > 0])
    same(torch.nonzero(xn > 0), torch.nonzero(x > 0))
    same(xn.index_select(1, idx.to(DEV)), x.index_select(1, idx))
    same(xn.gather(1, idx.to(DEV).repeat(5, 1)), x.gather(1, idx.repeat(5, 1)))


def test_index_put_with_cpu_indices():
    x, xn = pair(5, 6, seed=11)
    rows = torch.tensor([0, 3])
    cols = torch.tensor([1, 5])
    vals = torch.tensor([10.0, 20.0])
    for t, v in ((x, vals), (xn, vals.to(DEV))):
        t[rows, cols] = v
        t[torch.tensor([2])] = 7.0
        t.index_put_((rows,), torch.tensor(-1.0, device=t.device), accumulate=True)
        t[t < -1.5] = 0
        t.index_add_(0, torch.tensor([1, 1], device=t.device), torch.ones(2, 6, device=t.device))
        t.index_copy_(1, torch.tensor([4], device=t.device), torch.full((5, 1), 3.0, device=t.device))
    same(xn, x)


def test_non_index_cpu_tensor_is_rejected():
    a = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match="same device.*neuron:0.*cpu"):
        torch.atan2(a, torch.ones(3))
    # 0-dim CPU tensors are scalars and are fine, as on CUDA.
    same(torch.atan2(a, torch.tensor(2.0)), torch.atan2(torch.ones(3), torch.tensor(2.0)))


def test_fallback_result_lands_on_input_device():
    x, xn = pair(3, 3, seed=12)
    x1 = xn.to("neuron:2")
    out = torch.sin(x1) + torch.cos(x1)
    assert out.device == torch.device("neuron", 2)
    torch.testing.assert_close(out.cpu(), torch.sin(x) + torch.cos(x))
    v, i = torch.sort(x1)
    assert v.device == i.device == torch.device("neuron", 2)


def test_empty_and_zero_dim_tensors():
    e = torch.empty(0, 3, device=DEV)
    same(e.sum(0), torch.empty(0, 3).sum(0))
    same(torch.sin(e), torch.sin(torch.empty(0, 3)))
    s = torch.tensor(2.5).to(DEV)
    same(s * s + 1, torch.tensor(7.25))
    assert (s * 2).item() == 5.0


# --- views -----------------------------------------------------------------------------------


VIEWS = {
    "view": lambda t: t.view(6, 4),
    "reshape": lambda t: t.reshape(2, 12),
    "t": lambda t: t.t(),
    "transpose": lambda t: t.transpose(0, 1),
    "step_slice": lambda t: t[::2],
    "col_slice": lambda t: t[:, 1:5:3],
    "select": lambda t: t[2],
    "narrow": lambda t: t.narrow(1, 2, 3),
    "unfold": lambda t: t.unfold(1, 3, 3),  # windows that do not overlap: writes are well defined
    "as_strided": lambda t: t.as_strided((3, 2), (5, 2), 1),
    "diagonal": lambda t: t.diagonal(),
    "diagonal_offset": lambda t: t.diagonal(offset=1),
    "expand": lambda t: t[1:2].expand(3, 6),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t[:, :1].squeeze(1),
    "permute": lambda t: t.view(2, 2, 6).permute(2, 0, 1),
    "flatten": lambda t: t.flatten(),
    "unbind": lambda t: t.unbind(1)[3],
    "split": lambda t: t.split(2, dim=1)[1],
    "chunk": lambda t: t.chunk(2)[1],
    "movedim": lambda t: t.view(2, 2, 6).movedim(0, 2),
    "view_dtype": lambda t: t.view(torch.int32),
    "detach": lambda t: t.detach(),
    "alias": lambda t: t[...],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views_share_storage_and_write_through(name):
    fn = VIEWS[name]
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    base_n = base.to(DEV)
    torch_neuronx.clear_op_tracking()
    v, vn = fn(base), fn(base_n)
    assert torch_neuronx.get_fallback_ops() == [], "view ops must not go through the fallback"
    assert vn.device.type == DEV
    assert vn.untyped_storage().data_ptr() == base_n.untyped_storage().data_ptr()
    assert vn.shape == v.shape and vn.stride() == v.stride() and vn.storage_offset() == v.storage_offset()
    assert torch.equal(vn.cpu(), v)
    # Writes through the view reach the base, and writes to the base reach the view.
    for t in (v, vn):
        if t.dtype == torch.int32:
            t.fill_(7)
        elif name == "expand":
            t[0].fill_(-5.0)
        else:
            t.mul_(-1).add_(0.5)
    assert torch.equal(base_n.cpu(), base)
    base.add_(100)
    base_n.add_(100)
    assert torch.equal(vn.cpu(), v)


def test_overlapping_unfold_reads():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    v, vn = base.unfold(1, 3, 2), base.to(DEV).unfold(1, 3, 2)
    assert vn.stride() == v.stride() == (6, 2, 1)
    same(vn, v, exact=True)
    same(vn.sum(-1), v.sum(-1))


def test_view_as_real_and_complex():
    z = torch.complex(torch.arange(6.0), -torch.arange(6.0)).reshape(2, 3)
    zn = z.to(DEV)
    r, rn = torch.view_as_real(z), torch.view_as_real(zn)
    assert rn.untyped_storage().data_ptr() == zn.untyped_storage().data_ptr()
    assert rn.shape == (2, 3, 2) and torch.equal(rn.cpu(), r)
    r[..., 1] = 9.0
    rn[..., 1] = 9.0
    assert torch.equal(zn.cpu(), z)
    for t in (z, zn):
        t.real.mul_(2)
    assert torch.equal(zn.cpu(), z)
    back = torch.view_as_complex(rn)
    assert back.untyped_storage().data_ptr() == zn.untyped_storage().data_ptr()
    assert torch.equal(back.cpu(), z)


def test_conj_and_neg_views():
    """conj() and the imaginary part of a conj() are lazy (a conjugate / negative bit on a view):
    copies, the fallback and views must resolve them as the CPU does."""
    z = torch.complex(torch.arange(6.0), torch.arange(6.0) + 1).reshape(2, 3)
    zn = z.to(DEV)
    c, cn = z.conj(), zn.conj()
    assert cn.is_conj() and cn.untyped_storage().data_ptr() == zn.untyped_storage().data_ptr()
    assert torch.equal(cn.cpu(), c)  # device -> host copy of a conj view
    same(cn.resolve_conj(), c.resolve_conj(), exact=True)
    same(cn.clone(), c.clone(), exact=True)
    same(cn.to("neuron:1"), c.resolve_conj(), exact=True)
    same(cn * zn, c * z, exact=True)
    same(cn.imag, c.imag, exact=True)  # a negative-bit view
    assert torch.equal((-cn.imag).cpu(), -c.imag)
    same(cn.imag.resolve_neg() * 2, c.imag.resolve_neg() * 2, exact=True)
    same(zn @ zn.mH, z @ z.mH)
    # Writes into a conj view store the conjugate.
    dst = torch.zeros(2, 3, dtype=torch.complex64)
    dst_n = dst.to(DEV)
    dst.conj().copy_(z)
    dst_n.conj().copy_(zn)
    same(dst_n, dst, exact=True)
    dst_n.conj()[0].copy_(z[1])  # host -> device into a conj view
    dst[0] = z[1].conj()
    same(dst_n, dst, exact=True)


def test_complex_autograd_through_conj():
    w = torch.randn(4, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    wc, wn = w.clone().requires_grad_(), w.to(DEV).requires_grad_()
    for t in (wc, wn):
        (t * t.conj() + t.conj() * 2).real.sum().backward()
    same(wn.grad, wc.grad)


def test_view_errors_match_cpu():
    x = torch.zeros(4, 6, device=DEV)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.t().view(24)
    with pytest.raises(RuntimeError, match="shape '\\[5, 5\\]' is invalid"):
        x.view(5, 5)


# --- kernel trace ----------------------------------------------------------------------------


def test_kernel_trace_rows():
    torch_neuronx.clear_kernel_trace()
    torch.randn(1000, device=DEV)
    torch.randn(24, device=DEV)
    rows = {row["op"]: row for row in torch_neuronx.kernel_trace()}
    normal = rows["aten::normal_"]
    assert set(normal) == {
        "op", "kind", "engine", "launches", "ops", "flops", "bytes_read", "bytes_written",
        "bytes", "engine_bytes", "host_ns", "sim_ns",
    }
    assert normal["kind"] == "kernel"
    assert normal["engine"] == "gpsimd"
    assert normal["launches"] == 2
    # A random fill writes every element and reads nothing; one draw per element on GpSimd.
    assert normal["bytes_written"] == (1000 + 24) * 4 and normal["bytes_read"] == 0
    assert normal["ops"]["gpsimd"] == 1024 and normal["flops"] == 0
    # Per engine (read, written): all of it on GpSimd.
    assert normal["engine_bytes"]["gpsimd"] == (0, (1000 + 24) * 4)
    assert all(sum(normal["engine_bytes"][e]) == 0 for e in normal["engine_bytes"] if e != "gpsimd")
    assert normal["host_ns"] > 0 and normal["sim_ns"] > 0


def test_kernel_trace_records_copies_and_not_fallbacks():
    x = torch.randn(256, device=DEV)
    torch_neuronx.clear_kernel_trace()
    x.to(torch.float16)
    torch.i0(x)  # a fallback is host work: a record of its own kind, with its copies
    rows = torch_neuronx.kernel_trace()
    fallback = next(r for r in rows if r["op"] == "aten::i0.out")
    assert fallback["kind"] == "host_fallback" and fallback["bytes"] == 0
    copy = next(r for r in rows if r["op"] == "aten::_copy_from")
    assert copy["engine"] == "dma" and copy["launches"] >= 1 and copy["bytes"] >= 256 * 2
    assert all(r["launches"] >= 1 and r["bytes"] >= 0 for r in rows)
