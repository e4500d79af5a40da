"""LSTM and GRU on neuron: the fused cells (_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their
backward ops, which PyTorch calls on every non-CPU device) against float64 references with CUDA's
semantics, and nn.LSTM / nn.GRU / nn.LSTMCell / nn.GRUCell against the CPU on the same weights and
inputs, with no CPU fallback.

Tolerances come from the arithmetic:

* The cells compute each element's gates in the op-math type (float32 for bf16/f16) from the
  stored inputs and round each stored result once. Against a float64 evaluation of the same
  formulas on the same stored inputs, a result is off by its own rounding, u_st * |ref|, plus the
  op-math error of about ten dependent float ops whose slopes (sigmoid' <= 1/4, tanh' <= 1, gate
  values <= 1) do not amplify: CELL_OPS * u_acc * (1 + sum of the magnitudes that enter).
* Whole modules (module_tolerance): one time step passes a value through at most R_STEP stored
  roundings in sequence on the CPU's unfused path (two gate GEMM results, their sum, the
  activation, the cell's product and sum, tanh(c'), the output product); the fused path stores
  fewer. An error made at one step reaches the next damped by the forget gate (< 1) and the
  sigmoid/tanh slopes, by at least 1/2 per step in these well-conditioned models, so all steps
  together add at most twice one step's error: 2 * R_STEP * u_st * scale. Float32 accumulations
  (GEMMs over the input and hidden sizes, weight gradients summed over time and batch) add
  n_acc * 2^-24 * scale. scale is the tensor's largest magnitude in the float64 reference. The
  damping premise is checked, not assumed: the CPU's own result must meet the same bound.
"""

import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils._python_dispatch import TorchDispatchMode

import torch_neuronx

DEV = "neuron"
aten = torch.ops.aten

UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11,
                 torch.float64: 2.0**-53}
OPMATH = {torch.float32: torch.float32, torch.bfloat16: torch.float32,
          torch.float16: torch.float32, torch.float64: torch.float64}
CELL_OPS = 16  # dependent op-math operations behind one cell result, rounded up
R_STEP = 8  # stored roundings one time step passes through in sequence (see the docstring)
U_F32 = 2.0**-24

KERNEL_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
MODULE_DTYPES = [torch.float32, torch.bfloat16]


def _ids(dtypes):
    return [str(d).removeprefix("torch.") for d in dtypes]


def _u_acc(dtype):
    return UNIT_ROUNDOFF[OPMATH[dtype]]


def _assert_within(got, ref, tol, what):
    """|got - ref| <= tol elementwise (tol a tensor or a number), with the worst element named."""
    got = got.detach().cpu().double()
    excess = (got - ref).abs() - tol
    worst = int(excess.flatten().argmax())
    assert excess.max() <= 0, (
        f"{what}: |got - ref| exceeds the bound at flat index {worst}: got "
        f"{got.flatten()[worst].item()!r}, ref {ref.flatten()[worst].item()!r}, bound "
        f"{(tol if isinstance(tol, float) else tol.flatten()[worst].item())!r}")


# --- float64 references with CUDA's semantics ----------------------------------------------------


def lstm_cell_reference(ig, hg, cx, b1=None, b2=None):
    pre = ig.double() + hg.double()
    if b1 is not None:
        pre = pre + b1.double() + b2.double()
    i, f, g, o = pre.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx.double() + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def lstm_backward_reference(grad_hy, grad_cy, cx, cy, workspace):
    """The gradient of the gates' pre-activations and of cx, from the stored gates."""
    i, f, g, o = workspace.double().chunk(4, 1)
    gh = torch.zeros_like(i) if grad_hy is None else grad_hy.double()
    gc = torch.zeros_like(i) if grad_cy is None else grad_cy.double()
    t = cy.double().tanh()
    dc = gh * o * (1 - t * t) + gc
    gates = torch.cat([dc * g * i * (1 - i), dc * cx.double() * f * (1 - f), dc * i * (1 - g * g),
                       gh * t * o * (1 - o)], 1)
    return gates, dc * f


def gru_cell_reference(ig, hg, hx, b1=None, b2=None):
    ig, hg = ig.double(), hg.double()
    if b1 is not None:
        ig, hg = ig + b1.double(), hg + b2.double()
    ir, iz, in_ = ig.chunk(3, 1)
    hr, hz, hn = hg.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx.double() - n)
    return hy, torch.cat([r, z, n, hx.double(), hn], 1)


def gru_backward_reference(grad_hy, workspace):
    r, z, n, hx, hn = workspace.double().chunk(5, 1)
    go = grad_hy.double()
    dz = go * (hx - n) * (1 - z) * z
    dn = go * (1 - z) * (1 - n * n)
    dr = dn * hn * (1 - r) * r
    return torch.cat([dr, dz, dn], 1), torch.cat([dr, dz, dn * r], 1), go * z


def _cell_inputs(gates, batch, hidden, dtype, bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    ig = torch.randn(batch, gates * hidden, generator=g).to(dtype)
    hg = torch.randn(batch, gates * hidden, generator=g).to(dtype)
    prev = torch.randn(batch, hidden, generator=g).to(dtype)
    b1 = torch.randn(gates * hidden, generator=g).to(dtype) if bias else None
    b2 = torch.randn(gates * hidden, generator=g).to(dtype) if bias else None
    return ig, hg, prev, b1, b2


def _neuron(*tensors):
    return [None if t is None else t.to(DEV) for t in tensors]


def _magnitude(*tensors):
    """Per element of a [batch, hidden] result: 1 + the magnitudes of the gate inputs that enter
    it, the largest over the gates."""
    total = 0
    for t in tensors:
        if t is not None:
            total = total + t.double().abs()
    return total


# --- the cells --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=_ids(KERNEL_DTYPES))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("batch, hidden", [(5, 7), (96, 128)], ids=["small", "parallel"])
def test_lstm_cell_forward_and_workspace(dtype, bias, batch, hidden):
    # "parallel": more than one parallel task's worth of rows (Recurrent.cpp's grain).
    ig, hg, cx, b1, b2 = _cell_inputs(4, batch, hidden, dtype, bias)
    hy, cy, ws = aten._thnn_fused_lstm_cell(*_neuron(ig, hg, cx, b1, b2))
    assert hy.device.type == DEV and ws.shape == (batch, 4 * hidden)
    assert hy.dtype == cy.dtype == ws.dtype == dtype and ws.is_contiguous()
    ref_hy, ref_cy, ref_ws = lstm_cell_reference(ig, hg, cx, b1, b2)
    u_st, u_acc = UNIT_ROUNDOFF[dtype], _u_acc(dtype)
    pre = _magnitude(ig, hg, None if b1 is None else b1.expand_as(ig),
                     None if b2 is None else b2.expand_as(ig))
    # A gate's error (from the pre-activation sum) enters c' multiplied by |cx|.
    s = (1 + pre.view(batch, 4, hidden).amax(1)) * (1 + cx.double().abs())
    _assert_within(hy, ref_hy, u_st * ref_hy.abs() + CELL_OPS * u_acc * s, "hy")
    _assert_within(cy, ref_cy, u_st * ref_cy.abs() + CELL_OPS * u_acc * s, "cy")
    _assert_within(ws, ref_ws, u_st * ref_ws.abs() + CELL_OPS * u_acc * (1 + pre),
                   "workspace i,f,g,o")


@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=_ids(KERNEL_DTYPES))
@pytest.mark.parametrize("grads", ["both", "hy", "cy"])
@pytest.mark.parametrize("batch, hidden", [(5, 7), (96, 128)], ids=["small", "parallel"])
def test_lstm_cell_backward(dtype, grads, batch, hidden):
    ig, hg, cx, b1, b2 = _cell_inputs(4, batch, hidden, dtype, bias=True)
    _, cy, ws = aten._thnn_fused_lstm_cell(*_neuron(ig, hg, cx, b1, b2))
    g = torch.Generator().manual_seed(1)
    grad_hy = torch.randn(batch, hidden, generator=g).to(dtype) if grads != "cy" else None
    grad_cy = torch.randn(batch, hidden, generator=g).to(dtype) if grads != "hy" else None
    d_gates, d_cx, d_bias = aten._thnn_fused_lstm_cell_backward_impl(
        *_neuron(grad_hy, grad_cy), cx.to(DEV), cy, ws, True)
    ref_gates, ref_cx = lstm_backward_reference(grad_hy, grad_cy, cx, cy.cpu(), ws.cpu())
    u_st, u_acc = UNIT_ROUNDOFF[dtype], _u_acc(dtype)
    # Magnitudes entering: the incoming gradients, times cx for the forget gate (gate values and
    # their derivatives are <= 1).
    s = 1 + _magnitude(grad_hy, grad_cy) * (1 + cx.double().abs())
    s4 = s.repeat(1, 4)
    _assert_within(d_gates, ref_gates, u_st * ref_gates.abs() + CELL_OPS * u_acc * s4, "grad_gates")
    _assert_within(d_cx, ref_cx, u_st * ref_cx.abs() + CELL_OPS * u_acc * s, "grad_cx")
    # The bias gradient sums the stored gate gradients over the batch: each carries u_st, the
    # float sum batch * u_acc, the result its own rounding.
    per_row = u_st * ref_gates.abs() + CELL_OPS * u_acc * s4
    ref_bias = ref_gates.sum(0)
    tol = (per_row + (batch * u_acc) * ref_gates.abs()).sum(0) + u_st * ref_bias.abs()
    _assert_within(d_bias, ref_bias, tol, "grad_bias")
    _, _, no_bias = aten._thnn_fused_lstm_cell_backward_impl(
        *_neuron(grad_hy, grad_cy), cx.to(DEV), cy, ws, False)
    assert no_bias is None


def test_lstm_cell_backward_without_gradients_computes_nothing():
    _, hg, cx, _, _ = _cell_inputs(4, 2, 3, torch.float32, bias=False)
    out = aten._thnn_fused_lstm_cell_backward_impl(None, None, cx.to(DEV), cx.to(DEV), hg.to(DEV),
                                                   True)
    assert out == (None, None, None)


@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=_ids(KERNEL_DTYPES))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("batch, hidden", [(5, 7), (96, 128)], ids=["small", "parallel"])
def test_gru_cell_forward_and_workspace(dtype, bias, batch, hidden):
    # "parallel": more than one parallel task's worth of rows (Recurrent.cpp's grain).
    ig, hg, hx, b1, b2 = _cell_inputs(3, batch, hidden, dtype, bias)
    hy, ws = aten._thnn_fused_gru_cell(*_neuron(ig, hg, hx, b1, b2))
    assert ws.shape == (batch, 5 * hidden) and hy.dtype == ws.dtype == dtype
    ref_hy, ref_ws = gru_cell_reference(ig, hg, hx, b1, b2)
    u_st, u_acc = UNIT_ROUNDOFF[dtype], _u_acc(dtype)
    pre = _magnitude(ig, hg, None if b1 is None else b1.expand_as(ig),
                     None if b2 is None else b2.expand_as(ig))
    # The reset gate's error enters n multiplied by |hn|, the update gate's h' by |hx - n|.
    pre_max = pre.view(batch, 3, hidden).amax(1)
    s = (1 + pre_max) * (1 + pre_max + hx.double().abs())
    _assert_within(hy, ref_hy, u_st * ref_hy.abs() + CELL_OPS * u_acc * s, "hy")
    _assert_within(ws, ref_ws, u_st * ref_ws.abs() + CELL_OPS * u_acc * s.repeat(1, 5),
                   "workspace r,z,n,hx,hn")
    # The previous state is kept as stored, bit for bit.
    assert torch.equal(ws[:, 3 * hidden:4 * hidden].cpu(), hx)


@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=_ids(KERNEL_DTYPES))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("batch, hidden", [(5, 7), (96, 128)], ids=["small", "parallel"])
def test_gru_cell_backward(dtype, bias, batch, hidden):
    ig, hg, hx, b1, b2 = _cell_inputs(3, batch, hidden, dtype, bias)
    _, ws = aten._thnn_fused_gru_cell(*_neuron(ig, hg, hx, b1, b2))
    grad_hy = torch.randn(batch, hidden, generator=torch.Generator().manual_seed(1)).to(dtype)
    d_in, d_hid, d_hx, d_b1, d_b2 = aten._thnn_fused_gru_cell_backward(grad_hy.to(DEV), ws, bias)
    ref_in, ref_hid, ref_hx = gru_backward_reference(grad_hy, ws.cpu())
    u_st, u_acc = UNIT_ROUNDOFF[dtype], _u_acc(dtype)
    # Magnitudes entering: the incoming gradient times the stored hx, n and hn.
    wsd = ws.cpu().double().abs().view(batch, 5, hidden)
    s = 1 + grad_hy.double().abs() * (1 + wsd[:, 2] + wsd[:, 3] + wsd[:, 4])
    s3 = s.repeat(1, 3)
    _assert_within(d_in, ref_in, u_st * ref_in.abs() + CELL_OPS * u_acc * s3, "grad_input_gates")
    _assert_within(d_hid, ref_hid, u_st * ref_hid.abs() + CELL_OPS * u_acc * s3,
                   "grad_hidden_gates")
    _assert_within(d_hx, ref_hx, u_st * ref_hx.abs() + CELL_OPS * u_acc * s, "grad_hx")
    if bias:
        for got, ref_rows in ((d_b1, ref_in), (d_b2, ref_hid)):
            per_row = u_st * ref_rows.abs() + CELL_OPS * u_acc * s3
            ref = ref_rows.sum(0)
            tol = (per_row + (batch * u_acc) * ref_rows.abs()).sum(0) + u_st * ref.abs()
            _assert_within(got, ref, tol, "grad bias")
    else:
        assert d_b1 is None and d_b2 is None


def test_cell_backward_formulas_are_the_derivatives():
    """The backward kernels, run in float64, against autograd of the float64 forward formulas:
    the saved-workspace formulas are the true derivatives."""
    batch, hidden = 4, 6
    ig, hg, cx, b1, b2 = _cell_inputs(4, batch, hidden, torch.float64, bias=True)
    leaves = [t.clone().requires_grad_() for t in (ig, hg, cx, b1, b2)]
    hy, cy, _ = lstm_cell_reference(*leaves)
    g = torch.Generator().manual_seed(3)
    gh, gc = torch.randn(batch, hidden, generator=g, dtype=torch.float64), torch.randn(
        batch, hidden, generator=g, dtype=torch.float64)
    d_ig, d_hg, d_cx, d_b1, d_b2 = torch.autograd.grad((hy * gh).sum() + (cy * gc).sum(), leaves)
    _, cy_n, ws = aten._thnn_fused_lstm_cell(*_neuron(ig, hg, cx, b1, b2))
    gates, dcx, dbias = aten._thnn_fused_lstm_cell_backward_impl(gh.to(DEV), gc.to(DEV), cx.to(DEV),
                                                                 cy_n, ws, True)
    for got, ref in ((gates, d_ig), (gates, d_hg), (dcx, d_cx), (dbias, d_b1), (dbias, d_b2)):
        torch.testing.assert_close(got.cpu(), ref, rtol=1e-12, atol=1e-12)

    ig, hg, hx, b1, b2 = _cell_inputs(3, batch, hidden, torch.float64, bias=True)
    leaves = [t.clone().requires_grad_() for t in (ig, hg, hx, b1, b2)]
    hy, _ = gru_cell_reference(*leaves)
    refs = torch.autograd.grad((hy * gh).sum(), leaves)
    _, ws = aten._thnn_fused_gru_cell(*_neuron(ig, hg, hx, b1, b2))
    got = aten._thnn_fused_gru_cell_backward(gh.to(DEV), ws, True)
    for i, ref in enumerate(refs):
        torch.testing.assert_close(got[i].cpu(), ref, rtol=1e-12, atol=1e-12)


def test_cells_read_strided_inputs():
    """Non-contiguous arguments give the contiguous arguments' results exactly."""
    batch, hidden = 3, 4
    ig, hg, cx, b1, b2 = _cell_inputs(4, batch, hidden, torch.float32, bias=True)
    wide = torch.randn(batch, 8 * hidden).to(DEV)
    wide[:, ::2] = ig.to(DEV)
    cx_t = cx.t().contiguous().to(DEV).t()
    b1_s = torch.zeros(2 * 4 * hidden, device=DEV)
    b1_s[::2] = b1.to(DEV)
    strided = aten._thnn_fused_lstm_cell(wide[:, ::2], hg.to(DEV), cx_t, b1_s[::2], b2.to(DEV))
    dense = aten._thnn_fused_lstm_cell(*_neuron(ig, hg, cx, b1, b2))
    for s, d in zip(strided, dense):
        assert torch.equal(s.cpu(), d.cpu())
    hx_t = cx.t().contiguous().to(DEV).t()
    ig3, hg3 = ig[:, :3 * hidden], hg[:, :3 * hidden]
    strided = aten._thnn_fused_gru_cell(ig3.to(DEV), hg3.t().contiguous().to(DEV).t(), hx_t)
    dense = aten._thnn_fused_gru_cell(ig3.to(DEV), hg3.to(DEV), cx.to(DEV))
    for s, d in zip(strided, dense):
        assert torch.equal(s.cpu(), d.cpu())


def test_cell_launch_records_vector_and_scalar_work():
    """One launch per cell; the gate sums and products on the Vector engine, the activations on
    the Scalar engine (counts per hidden element, as Recurrent.cpp derives them)."""
    batch, hidden = 3, 5
    n = batch * hidden
    ig, hg, cx, b1, b2 = _cell_inputs(4, batch, hidden, torch.float32, bias=True)
    torch_neuronx.clear_kernel_trace()
    _, cy, ws = aten._thnn_fused_lstm_cell(*_neuron(ig, hg, cx, b1, b2))
    aten._thnn_fused_lstm_cell_backward_impl(cx.to(DEV), None, cx.to(DEV), cy, ws, True)
    ig3, hg3, hx, b31, b32 = _cell_inputs(3, batch, hidden, torch.float32, bias=False)
    _, ws3 = aten._thnn_fused_gru_cell(*_neuron(ig3, hg3, hx, b31, b32))
    aten._thnn_fused_gru_cell_backward(hx.to(DEV), ws3, False)
    rows = {r["op"]: r for r in torch_neuronx.kernel_trace()}
    expected = {
        # 4 gates x (1 sum + 2 bias sums) + c' (3) + h' (1); 3 sigmoids + 2 tanh.
        "aten::_thnn_fused_lstm_cell": (16 * n, 5 * n),
        # 22 per element, tanh(c') on Scalar, and the bias gradient's sum over the batch.
        "aten::_thnn_fused_lstm_cell_backward_impl": (22 * n + 4 * n, 1 * n),
        # r, z sums (2), n (2), h' (3); 2 sigmoids + 1 tanh.
        "aten::_thnn_fused_gru_cell": (7 * n, 3 * n),
        "aten::_thnn_fused_gru_cell_backward": (15 * n, 0),
    }
    for op, (vector, scalar) in expected.items():
        row = rows[op]
        assert row["kind"] == "kernel" and row["launches"] == 1 and row["engine"] == "vector"
        assert (row["ops"]["vector"], row["ops"]["scalar"]) == (vector, scalar), op
        assert row["ops"]["tensor"] == 0 and row["bytes_read"] > 0 and row["bytes_written"] > 0


def test_cell_argument_errors():
    ig, hg, cx, b1, b2 = _neuron(*_cell_inputs(4, 2, 3, torch.float32, bias=True))
    with pytest.raises(RuntimeError, match="hidden_gates must have input_gates' shape"):
        aten._thnn_fused_lstm_cell(ig, hg[:, :8], cx)
    with pytest.raises(RuntimeError, match=r"cx must be \[batch, hidden_size\] = \[2, 3\]"):
        aten._thnn_fused_lstm_cell(ig, hg, cx.t())
    with pytest.raises(RuntimeError, match="input_gates must be 2-D"):
        aten._thnn_fused_lstm_cell(ig[:, :10], hg[:, :10], cx)
    with pytest.raises(RuntimeError, match="both input_bias and hidden_bias or neither"):
        aten._thnn_fused_lstm_cell(ig, hg, cx, b1, None)
    with pytest.raises(RuntimeError, match=r"cx is Double but the gates are Float.*\.to\("):
        aten._thnn_fused_lstm_cell(ig, hg, cx.double())
    with pytest.raises(RuntimeError, match="expected float32, bfloat16, float16 or float64"):
        aten._thnn_fused_lstm_cell(ig.int(), hg.int(), cx.int())
    with pytest.raises(RuntimeError, match="neuron:0 and cpu"):
        aten._thnn_fused_lstm_cell(ig, hg, cx.cpu())
    with pytest.raises(RuntimeError, match="workspace must be \\[batch, 4 \\* hidden_size\\]"):
        aten._thnn_fused_lstm_cell_backward_impl(cx, None, cx, cx, cx, True)
    _, ws = aten._thnn_fused_gru_cell(ig[:, :9], hg[:, :9], cx)
    with pytest.raises(RuntimeError, match="workspace must be \\[batch, 5 \\* hidden_size\\]"):
        aten._thnn_fused_gru_cell_backward(cx, ws[:, :10], False)


# --- whole modules against the CPU ---------------------------------------------------------------


def module_tolerance(ref, dtype, n_acc):
    """The bound of the module docstring for one tensor."""
    scale = ref.abs().max().item() if ref.numel() else 0.0
    return (2 * R_STEP * UNIT_ROUNDOFF[dtype] + n_acc * U_F32) * scale


def _cotangent(shape, dtype, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _flatten_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, torch.nn.utils.rnn.PackedSequence):
        return [out.data]
    return [t for item in out for t in _flatten_outputs(item)]


def run_module(module, args, device, compute_dtype, forward=None, mode=None):
    """Runs `module` (a copy, in `compute_dtype` on `device`) on `args` (CPU tensors, already
    rounded to the test dtype), backpropagates fixed cotangents, and returns every output and
    gradient by name, as float64 CPU tensors."""
    m = copy.deepcopy(module).to(device=device, dtype=compute_dtype)
    leaves = [a.to(device=device, dtype=compute_dtype).detach().requires_grad_() for a in args]
    forward = forward or (lambda mod, *xs: mod(*xs))
    with mode if mode is not None else _null():
        outs = _flatten_outputs(forward(m, *leaves))
        loss = sum((o * _cotangent(o.shape, module_dtype(module), i).to(o)).sum()
                   for i, o in enumerate(outs))
        loss.backward()
    result = {f"out{i}": o for i, o in enumerate(outs)}
    result.update({f"grad_arg{i}": a.grad for i, a in enumerate(leaves)})
    result.update({f"grad_{n}": p.grad for n, p in m.named_parameters()})
    return {k: v.detach().cpu().double() for k, v in result.items()}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def module_dtype(module):
    return next(module.parameters()).dtype


def compare_module(module, args, dtype, n_acc, forward=None, modes=(None, None, None)):
    """neuron and the CPU in `dtype`, each against the CPU in float64 on the same (rounded) weights
    and inputs; the neuron run must not use the CPU fallback."""
    module = copy.deepcopy(module).to(dtype)
    args = [a.to(dtype) for a in args]
    torch_neuronx.clear_op_tracking()
    got = run_module(module, args, DEV, dtype, forward, modes[0])
    assert torch_neuronx.get_fallback_ops() == []
    executed = torch_neuronx.get_executed_ops()
    cpu = run_module(module, args, "cpu", dtype, forward, modes[1])
    ref = run_module(module, args, "cpu", torch.float64, forward, modes[2])
    assert got.keys() == ref.keys()
    for name, r in ref.items():
        tol = module_tolerance(r, dtype, n_acc)
        cpu_err = (cpu[name] - r).abs().max().item()
        assert cpu_err <= tol, (f"premise: the CPU's own {dtype} {name} is {cpu_err:.3g} from "
                                f"float64, beyond the bound {tol:.3g}")
        err = (got[name] - r).abs().max().item()
        assert err <= tol, f"{name}: neuron {dtype} is {err:.3g} from float64, bound {tol:.3g}"
        assert (got[name] - cpu[name]).abs().max().item() <= 2 * tol, name
    return executed


def _rnn_args(cls, kwargs, seq, batch, input_size, hidden, seed=0):
    g = torch.Generator().manual_seed(seed)
    directions = 2 if kwargs.get("bidirectional") else 1
    layers = kwargs.get("num_layers", 1)
    out_size = kwargs.get("proj_size", 0) or hidden
    shape = (batch, seq, input_size) if kwargs.get("batch_first") else (seq, batch, input_size)
    x = torch.randn(shape, generator=g)
    h0 = torch.randn(directions * layers, batch, out_size, generator=g)
    if cls is torch.nn.LSTM:
        c0 = torch.randn(directions * layers, batch, hidden, generator=g)
        return [x, h0, c0], lambda m, x, h, c: m(x, (h, c))
    return [x, h0], lambda m, x, h: m(x, h)


def _n_acc(input_size, hidden, seq, batch, kwargs, gates):
    """The longest float32 accumulations: a layer's input GEMM (input or both directions' output)
    plus the hidden GEMM, the backward's GEMMs over the gates, and the weight gradients' sums over
    time and batch."""
    directions = 2 if kwargs.get("bidirectional") else 1
    return max(input_size, directions * hidden) + hidden + gates * hidden + seq * batch


RNN_CONFIGS = {
    "one_layer": {},
    "two_layer_bidirectional": {"num_layers": 2, "bidirectional": True},
    "batch_first_no_bias": {"batch_first": True, "bias": False},
    "two_layer_batch_first_bidirectional": {"num_layers": 2, "batch_first": True,
                                            "bidirectional": True},
}


@pytest.mark.parametrize("dtype", MODULE_DTYPES, ids=_ids(MODULE_DTYPES))
@pytest.mark.parametrize("config", list(RNN_CONFIGS))
@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU], ids=["LSTM", "GRU"])
def test_rnn_module_matches_cpu(cls, config, dtype):
    kwargs = RNN_CONFIGS[config]
    seq, batch, input_size, hidden = 6, 3, 10, 16
    torch.manual_seed(0)
    module = cls(input_size, hidden, **kwargs)
    args, forward = _rnn_args(cls, kwargs, seq, batch, input_size, hidden)
    gates = 4 if cls is torch.nn.LSTM else 3
    n_acc = _n_acc(input_size, hidden, seq, batch, kwargs, gates)
    executed = compare_module(module, args, dtype, n_acc, forward)
    cell = "aten::_thnn_fused_lstm_cell" if cls is torch.nn.LSTM else "aten::_thnn_fused_gru_cell"
    assert cell in executed and cell + ("_backward_impl" if gates == 4 else "_backward") in executed


@pytest.mark.parametrize("dtype", MODULE_DTYPES, ids=_ids(MODULE_DTYPES))
@pytest.mark.parametrize(
    "kwargs", [{"proj_size": 7}, {"proj_size": 5, "num_layers": 2, "bidirectional": True}],
    ids=["proj", "proj_two_layer_bidirectional"])
def test_lstm_projection_matches_cpu(kwargs, dtype):
    seq, batch, input_size, hidden = 5, 3, 8, 12
    torch.manual_seed(1)
    module = torch.nn.LSTM(input_size, hidden, **kwargs)
    args, forward = _rnn_args(torch.nn.LSTM, kwargs, seq, batch, input_size, hidden)
    compare_module(module, args, dtype, _n_acc(input_size, hidden, seq, batch, kwargs, 4), forward)


@pytest.mark.parametrize("dtype", MODULE_DTYPES, ids=_ids(MODULE_DTYPES))
@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU], ids=["LSTM", "GRU"])
def test_packed_sequence_matches_cpu(cls, dtype):
    """pack_padded_sequence input (unsorted lengths), bidirectional, padded back afterwards."""
    seq, batch, input_size, hidden = 6, 4, 5, 8
    lengths = torch.tensor([4, 6, 1, 3])
    torch.manual_seed(2)
    module = cls(input_size, hidden, num_layers=2, bidirectional=True)
    x = torch.randn(seq, batch, input_size, generator=torch.Generator().manual_seed(3))

    def forward(m, x):
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        out, state = m(packed)
        padded, out_lengths = pad_packed_sequence(out)
        assert torch.equal(out_lengths, lengths)
        return padded, state

    kwargs = {"bidirectional": True}
    compare_module(module, [x], dtype, _n_acc(input_size, hidden, seq, batch, kwargs, 4), forward)


@pytest.mark.parametrize("dtype", MODULE_DTYPES, ids=_ids(MODULE_DTYPES))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell], ids=["LSTMCell", "GRUCell"])
def test_cell_module_matches_cpu(cls, bias, dtype):
    """A few steps of a cell module, the state carried from step to step, as user code loops."""
    seq, batch, input_size, hidden = 4, 3, 6, 9
    torch.manual_seed(4)
    module = cls(input_size, hidden, bias=bias)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(seq, batch, input_size, generator=g)
    h0 = torch.randn(batch, hidden, generator=g)
    lstm = cls is torch.nn.LSTMCell
    args = [x, h0] + ([torch.randn(batch, hidden, generator=g)] if lstm else [])

    def forward(m, x, *state):
        state = tuple(state) if lstm else state[0]
        outs = []
        for t in range(x.shape[0]):
            state = m(x[t], state)
            outs.append(state[0] if lstm else state)
        return torch.stack(outs), state

    compare_module(module, args, dtype, input_size + hidden + 4 * hidden + seq * batch, forward)


class _RecordDropoutMasks(TorchDispatchMode):
    """Keeps the mask of every native_dropout on neuron, in call order."""

    def __init__(self):
        super().__init__()
        self.masks = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is aten.native_dropout.default:
            self.masks.append(out[1].cpu())
        return out


class _ReplayDropoutMasks(TorchDispatchMode):
    """Makes the CPU's dropout draw (bernoulli_ on a fresh tensor) return the recorded masks."""

    def __init__(self, masks):
        super().__init__()
        self.masks = list(masks)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is aten.bernoulli_.float:
            mask = self.masks.pop(0)
            assert mask.shape == args[0].shape
            return args[0].copy_(mask)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", MODULE_DTYPES, ids=_ids(MODULE_DTYPES))
@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU], ids=["LSTM", "GRU"])
def test_dropout_between_layers_in_train_mode(cls, dtype):
    """Train mode with dropout between layers: neuron draws its masks from the neuron generator
    (seeded: the same seed gives the same masks); with those masks replayed on the CPU, the results
    match the CPU's. p = 0.5 makes the dropout scale (2) exact in every dtype."""
    seq, batch, input_size, hidden, layers = 5, 3, 6, 8, 3
    torch.manual_seed(6)
    module = cls(input_size, hidden, num_layers=layers, dropout=0.5, bidirectional=True).train()
    kwargs = {"bidirectional": True, "num_layers": layers}
    args, forward = _rnn_args(cls, kwargs, seq, batch, input_size, hidden, seed=7)

    recorded = []
    for _ in range(2):
        torch.neuron.manual_seed(1234)
        recorder = _RecordDropoutMasks()
        run_module(copy.deepcopy(module).to(dtype), [a.to(dtype) for a in args], DEV, dtype,
                   forward, recorder)
        recorded.append(recorder.masks)
    assert len(recorded[0]) == layers - 1
    assert all(torch.equal(a, b) for a, b in zip(*recorded)), "same seed, different masks"
    assert all(0 < m.float().mean() < 1 for m in recorded[0])  # masks that drop something

    torch.neuron.manual_seed(1234)
    modes = (None, _ReplayDropoutMasks(recorded[0]), _ReplayDropoutMasks(recorded[0]))
    compare_module(module, args, dtype, _n_acc(input_size, hidden, seq, batch, kwargs, 4),
                   forward, modes)
    assert modes[1].masks == [] and modes[2].masks == []  # the CPU runs used every mask


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell], ids=["LSTMCell", "GRUCell"])
def test_double_backward_matches_cpu(cls):
    """With create_graph, autograd differentiates through _thnn_differentiable_*_backward, which
    decomposes into native ops: a gradient penalty's gradient matches the CPU's."""
    torch.manual_seed(8)
    module = cls(5, 7)
    g = torch.Generator().manual_seed(9)
    x, h = torch.randn(3, 5, generator=g), torch.randn(3, 7, generator=g)
    state = (h, torch.randn(3, 7, generator=g)) if cls is torch.nn.LSTMCell else h

    def penalty_grads(device):
        m = copy.deepcopy(module).to(device)
        xs = x.to(device).requires_grad_()
        st = tuple(s.to(device) for s in state) if isinstance(state, tuple) else state.to(device)
        out = m(xs, st)
        out = out[0] if isinstance(out, tuple) else out
        (gx,) = torch.autograd.grad(out.square().sum(), xs, create_graph=True)
        gx.square().sum().backward()
        return [p.grad.cpu() for p in m.parameters()]

    torch_neuronx.clear_op_tracking()
    got = penalty_grads(DEV)
    assert torch_neuronx.get_fallback_ops() == []
    # float32 through a forward and two differentiations of about 30 dependent ops each, plus
    # GEMMs over at most 4 * hidden = 28 terms in each: under 256 u of the largest magnitude.
    for a, b in zip(got, penalty_grads("cpu")):
        torch.testing.assert_close(a, b, rtol=0, atol=256 * U_F32 * max(1.0, b.abs().max().item()))


def test_issue_example_runs_natively():
    """The report's reproduction: nn.LSTM(10, 20) on a [5, 2, 10] neuron input."""
    torch_neuronx.clear_op_tracking()
    torch.manual_seed(10)
    lstm = torch.nn.LSTM(10, 20)
    x = torch.randn(5, 2, 10)
    out, (h, c) = copy.deepcopy(lstm).to(DEV)(x.to(DEV))
    assert torch_neuronx.get_fallback_ops() == []
    ref, (ref_h, ref_c) = lstm(x)
    assert out.device.type == DEV and out.shape == (5, 2, 20) and h.shape == c.shape == (1, 2, 20)
    n_acc = 10 + 20 + 4 * 20 + 10
    for a, b in ((out, ref), (h, ref_h), (c, ref_c)):
        # Both are float32: each within the module bound of the float64 result, so within twice it.
        tol = 2 * module_tolerance(b.detach().double(), torch.float32, n_acc)
        assert (a.detach().cpu() - b.detach()).abs().max().item() <= tol
