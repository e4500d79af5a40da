"""Autograd on neuron: forward and backward of small models and of reductions, indexing and
broadcasting, checked against the same computation on the CPU; leaves, retain_graph,
torch.autograd.grad, in-place ops, and SGD/AdamW loops."""

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

pytestmark = pytest.mark.filterwarnings(
    "ignore:Operator .* executed via CPU fallback", "ignore:An output with one or more elements"
)

DEV = "neuron"
TOL = {"rtol": 1e-5, "atol": 1e-6}


def leaves(*shape, seed=0, n=1):
    """`n` pairs of equal leaf tensors (cpu, neuron) that require grad."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        base = torch.randn(*shape, generator=g)
        out.append((base.clone().requires_grad_(), base.to(DEV).requires_grad_()))
    return out


def check(fn, *pairs):
    """Runs fn on the CPU and neuron leaves, backpropagates a fixed cotangent, compares outputs and
    every leaf's gradient."""
    cpu = [c for c, _ in pairs]
    neu = [n for _, n in pairs]
    out_c, out_n = fn(*cpu), fn(*neu)
    assert out_n.device.type == DEV
    torch.testing.assert_close(out_n.detach().cpu(), out_c.detach(), **TOL)
    cot = torch.linspace(-1, 1, out_c.numel()).reshape(out_c.shape).to(out_c.dtype)
    out_c.backward(cot)
    out_n.backward(cot.to(DEV))
    for c, n in pairs:
        assert n.grad is not None and n.grad.device == n.device
        torch.testing.assert_close(n.grad.cpu(), c.grad, **TOL)


# --- leaves ----------------------------------------------------------------------------------


def test_leaf_tensors_created_on_neuron():
    for t in (
        torch.randn(3, 4, device=DEV, requires_grad=True),
        torch.zeros(2, device=DEV, requires_grad=True),
        torch.ones(2, 2, device="neuron:1").requires_grad_(),
        torch.nn.Parameter(torch.empty(3, device=DEV).fill_(1.5)),
    ):
        assert t.is_leaf and t.requires_grad and t.grad_fn is None and t.device.type == DEV
        (t * t).sum().backward()
        assert t.grad.device == t.device
        torch.testing.assert_close(t.grad.cpu(), 2 * t.detach().cpu())


def test_gradient_flows_back_across_the_copy():
    x = torch.randn(5, requires_grad=True)
    y = x.to(DEV)
    assert not y.is_leaf and y.grad_fn is not None
    (y.exp() * 3).sum().backward()
    assert x.grad.device.type == "cpu"
    torch.testing.assert_close(x.grad, 3 * x.detach().exp(), **TOL)
    # and from neuron:0 to neuron:1
    a = torch.randn(4, device=DEV, requires_grad=True)
    (a.to("neuron:1") ** 2).sum().backward()
    assert a.grad.device == torch.device("neuron", 0)
    torch.testing.assert_close(a.grad.cpu(), 2 * a.detach().cpu())


def test_no_grad_and_detach():
    x = torch.randn(3, device=DEV, requires_grad=True)
    with torch.no_grad():
        y = x * 2
    assert not y.requires_grad
    z = x.detach()
    assert not z.requires_grad and z.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


# --- models ----------------------------------------------------------------------------------


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(10, 32),
        torch.nn.GELU(),
        torch.nn.LayerNorm(32),
        torch.nn.Linear(32, 16),
        torch.nn.Tanh(),
        torch.nn.Dropout(0.0),
        torch.nn.Linear(16, 4),
    )


@pytest.mark.parametrize(
    "loss_fn",
    [
        lambda out, y: F.cross_entropy(out, y),
        lambda out, y: F.mse_loss(out, F.one_hot(y, 4).float()),
        lambda out, y: F.binary_cross_entropy_with_logits(out, F.one_hot(y, 4).float()),
        lambda out, y: F.smooth_l1_loss(out.softmax(-1), F.one_hot(y, 4).float()),
        lambda out, y: F.nll_loss(F.log_softmax(out, -1), y, reduction="sum"),
    ],
    ids=["cross_entropy", "mse", "bce_logits", "smooth_l1_softmax", "nll_sum"],
)
def test_mlp_forward_backward_matches_cpu(loss_fn):
    torch.manual_seed(0)
    model_c = mlp()
    model_n = mlp()
    model_n.load_state_dict(model_c.state_dict())
    model_n.to(DEV)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(12, 10, generator=g)
    y = torch.randint(0, 4, (12,), generator=g)
    loss_c = loss_fn(model_c(x), y)
    loss_n = loss_fn(model_n(x.to(DEV)), y.to(DEV))
    torch.testing.assert_close(loss_n.detach().cpu(), loss_c.detach(), **TOL)
    loss_c.backward()
    loss_n.backward()
    for (name, pc), pn in zip(model_c.named_parameters(), model_n.parameters()):
        assert pn.grad.device.type == DEV, name
        torch.testing.assert_close(pn.grad.cpu(), pc.grad, **TOL, msg=name)


def test_embedding_attention_block_matches_cpu():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(20, 16)
            self.qkv = torch.nn.Linear(16, 48)
            self.out = torch.nn.Linear(16, 20)

        def forward(self, tokens):
            h = self.emb(tokens)
            q, k, v = self.qkv(h).chunk(3, dim=-1)
            att = (q @ k.transpose(-2, -1) / 4.0).masked_fill(
                torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool, device=h.device).triu(1),
                float("-inf"),
            )
            h = h + att.softmax(-1) @ v
            return self.out(F.rms_norm(h, (16,)))

    torch.manual_seed(0)
    m_c = Block()
    m_n = Block()
    m_n.load_state_dict(m_c.state_dict())
    m_n.to(DEV)
    tokens = torch.randint(0, 20, (2, 7), generator=torch.Generator().manual_seed(3))
    loss_c = F.cross_entropy(m_c(tokens).flatten(0, 1), tokens.flatten())
    loss_n = F.cross_entropy(m_n(tokens.to(DEV)).flatten(0, 1), tokens.to(DEV).flatten())
    torch.testing.assert_close(loss_n.detach().cpu(), loss_c.detach(), **TOL)
    loss_c.backward()
    loss_n.backward()
    for (name, pc), pn in zip(m_c.named_parameters(), m_n.parameters()):
        torch.testing.assert_close(pn.grad.cpu(), pc.grad, **TOL, msg=name)


# --- op families -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.sum(),
        lambda x: x.mean(dim=1),
        lambda x: x.sum(dim=(0, 2), keepdim=True),
        lambda x: x.max(dim=1).values,
        lambda x: x.amax(dim=(1, 2)),
        lambda x: x.min(),
        lambda x: x.norm(dim=-1),
        lambda x: x.var(dim=0),
        lambda x: x.std(),
        lambda x: x.logsumexp(dim=2),
        lambda x: x.prod(dim=1),
        lambda x: x.cumsum(dim=2),
        lambda x: x.softmax(dim=0),
        lambda x: x.sort(dim=-1).values,
        lambda x: x.topk(2, dim=1).values,
    ],
    ids=["sum", "mean", "sum_keepdim", "max_dim", "amax", "min", "norm", "var", "std",
         "logsumexp", "prod", "cumsum", "softmax", "sort", "topk"],
)
def test_reductions(fn):
    check(fn, *leaves(3, 4, 5, seed=2))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x[1],
        lambda x: x[:, 1::2],
        lambda x: x[..., -1],
        lambda x: x[torch.tensor([0, 2, 2])],  # CPU index tensor, repeated index
        lambda x: x[torch.tensor([0, 2]).to(x.device), :, torch.tensor([1, 3]).to(x.device)],
        lambda x: x[x.detach() > 0],
        lambda x: x.index_select(1, torch.tensor([3, 0, 3], device=x.device)),
        lambda x: x.gather(2, torch.tensor([[[0, 4]] * 4] * 3, device=x.device)),
        lambda x: x.masked_fill(x.detach() < 0, 0.0),
        lambda x: torch.where(x.detach() > 0, x, x * x),
        lambda x: x.flatten()[torch.randperm(60, generator=torch.Generator().manual_seed(0))],
        lambda x: x.narrow(2, 1, 3).unfold(1, 2, 1),
        lambda x: x.transpose(0, 2).reshape(-1, 3),
        lambda x: torch.zeros(3, 4, 5, device=x.device).index_put((torch.tensor([0, 1]),), x[:2] * 2),
        lambda x: torch.zeros(3, 4, 8, device=x.device).scatter(
            2, torch.tensor([[[0, 2, 4, 6, 7]] * 4] * 3, device=x.device), x
        ),
    ],
    ids=["int", "slice_step", "ellipsis", "cpu_index", "adv_pair", "mask", "index_select",
         "gather", "masked_fill", "where", "permute_index", "narrow_unfold", "transpose_reshape",
         "index_put", "scatter"],
)
def test_indexing(fn):
    check(fn, *leaves(3, 4, 5, seed=3))


@pytest.mark.parametrize(
    "shapes,fn",
    [
        (((4, 1), (1, 5)), lambda a, b: a + b),
        (((4, 5), (5,)), lambda a, b: a * b),
        (((2, 1, 3), (4, 1)), lambda a, b: (a - b) ** 2),
        (((3, 1), (1,)), lambda a, b: torch.maximum(a, b.expand(3, 1))),
        (((1,), (2, 3)), lambda a, b: a / (b.abs() + 1)),
        (((2, 3, 4), (4, 5)), lambda a, b: a @ b),
        (((5,), (5, 2)), lambda a, b: a @ b),
    ],
    ids=["outer_add", "row_mul", "3d_sq", "maximum", "scalar_div", "batched_matmul", "vecmat"],
)
def test_broadcasting(shapes, fn):
    (ac, an), = leaves(*shapes[0], seed=4)
    (bc, bn), = leaves(*shapes[1], seed=5)
    check(fn, (ac, an), (bc, bn))
    assert an.grad.shape == an.shape and bn.grad.shape == bn.shape


def test_cat_stack_split():
    pairs = leaves(2, 3, seed=6, n=3)
    check(lambda a, b, c: torch.cat([a, b * 2, c], dim=1), *pairs)
    pairs = leaves(2, 3, seed=7, n=3)
    check(lambda a, b, c: torch.stack([a, b, c]).sum(0) + torch.stack([a, c], dim=2)[..., 0], *pairs)
    pairs = leaves(6, 4, seed=8)
    check(lambda x: torch.cat([p * (i + 1) for i, p in enumerate(x.split([1, 2, 3]))]), *pairs)


# --- graph handling --------------------------------------------------------------------------


def test_retain_graph_accumulates():
    (xc, xn), = leaves(6, seed=9)
    for x in (xc, xn):
        y = (x.sin() * x).sum()
        y.backward(retain_graph=True)
        y.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.backward()
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, **TOL)
    expected = 2 * (xc.detach().cos() * xc.detach() + xc.detach().sin())
    torch.testing.assert_close(xc.grad, expected, **TOL)


def test_autograd_grad_and_double_backward():
    (xc, xn), = leaves(5, seed=10)
    results = []
    for x in (xc, xn):
        y = (x**3).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), x)
        assert x.grad is None  # autograd.grad does not accumulate into .grad
        results.append((g.detach().cpu(), gg.cpu()))
    (g_c, gg_c), (g_n, gg_n) = results
    torch.testing.assert_close(g_c, 3 * xc.detach() ** 2, **TOL)
    torch.testing.assert_close(gg_c, 6 * xc.detach(), **TOL)
    torch.testing.assert_close(g_n, g_c, **TOL)
    torch.testing.assert_close(gg_n, gg_c, **TOL)


def test_autograd_grad_multiple_inputs_and_outputs():
    pairs = leaves(3, 3, seed=11, n=2)
    res = []
    for a, b in (tuple(p[i] for p in pairs) for i in (0, 1)):
        u = (a @ b).tanh()
        v = (a * b).sum(1)
        ga, gb = torch.autograd.grad([u.sum(), v.sum()], [a, b], retain_graph=True)
        (gv,) = torch.autograd.grad(v, a, grad_outputs=torch.ones_like(v), allow_unused=True)
        res.append([ga.cpu(), gb.cpu(), gv.cpu()])
    for n, c in zip(res[1], res[0]):
        torch.testing.assert_close(n, c, **TOL)


def test_inplace_ops_in_graph():
    (xc, xn), = leaves(4, 5, seed=12)

    def fn(x):
        y = x * 2
        y.add_(1.0)
        y.mul_(x)  # y = (2x + 1) * x
        y[:, 0].zero_()
        z = y.clone()
        z.clamp_(min=-0.5)
        z.relu_()
        return z + y

    check(fn, (xc, xn))


def test_inplace_on_saved_tensor_is_detected():
    x = torch.randn(3, device=DEV, requires_grad=True)
    y = x.exp()  # exp saves its result
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_inplace_on_leaf_view_of_parameter_under_no_grad():
    p = torch.nn.Parameter(torch.ones(4, device=DEV))
    with torch.no_grad():
        p[1:3].mul_(5)
    (p * p).sum().backward()
    torch.testing.assert_close(p.grad.cpu(), torch.tensor([2.0, 10.0, 10.0, 2.0]))


def test_hooks_and_custom_function():
    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3 * x**2

    (xc, xn), = leaves(6, seed=13)
    seen = []
    for x in (xc, xn):
        y = Cube.apply(x)
        y.register_hook(lambda g: seen.append(g.device.type) or g * 2)
        y.sum().backward()
    assert seen == ["cpu", DEV]
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, **TOL)
    torch.testing.assert_close(xc.grad, 6 * xc.detach() ** 2, **TOL)


def test_gradient_accumulation_and_zero_grad():
    torch.manual_seed(0)
    m_c = torch.nn.Linear(4, 2)
    m_n = torch.nn.Linear(4, 2).to(DEV)
    m_n.load_state_dict(m_c.state_dict())
    x = torch.randn(3, 4)
    for _ in range(3):
        m_c(x).pow(2).sum().backward()
        m_n(x.to(DEV)).pow(2).sum().backward()
    torch.testing.assert_close(m_n.weight.grad.cpu(), m_c.weight.grad, **TOL)
    m_n.zero_grad(set_to_none=False)
    assert torch.count_nonzero(m_n.weight.grad.cpu()) == 0
    m_n.zero_grad()
    assert m_n.weight.grad is None


# --- optimizer loops -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda p: torch.optim.SGD(p, lr=0.1),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda p: torch.optim.AdamW(p, lr=1e-2),
        lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
        lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False),
    ],
    ids=["sgd", "sgd_nesterov_wd", "adamw", "adamw_amsgrad", "adamw_for_loop"],
)
def test_optimizer_loop_matches_cpu(make_opt):
    def run(device):
        torch.manual_seed(0)
        model = mlp().to(device)
        opt = make_opt(model.parameters())
        g = torch.Generator().manual_seed(1)
        x = torch.randn(16, 10, generator=g).to(device)
        y = torch.randint(0, 4, (16,), generator=g).to(device)
        losses = []
        for _ in range(5):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in model.parameters()]

    (l_c, p_c), (l_n, p_n) = run("cpu"), run(DEV)
    assert l_n == pytest.approx(l_c, rel=1e-5)
    assert l_c[-1] < l_c[0]  # it trains
    for a, b in zip(p_n, p_c):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


# --- activation checkpointing ----------------------------------------------------------------


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_with_dropout_replays_masks(use_reentrant):
    """torch.utils.checkpoint restores neuron's RNG state for the recomputation, so dropout draws
    the same mask twice and the gradients equal those without checkpointing."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.Dropout(0.5), torch.nn.GELU(), torch.nn.Linear(32, 1)
    ).to(DEV)
    x = torch.randn(16, 8, device=DEV, requires_grad=True)

    def run(ckpt):
        torch.neuron.manual_seed(3)
        model.zero_grad()
        x.grad = None
        out = checkpoint(model, x, use_reentrant=use_reentrant) if ckpt else model(x)
        out.sum().backward()
        return [out.detach().cpu(), x.grad.cpu()] + [p.grad.cpu() for p in model.parameters()]

    assert torch.neuron._initialized
    plain, ckpt = run(False), run(True)
    for a, b in zip(plain, ckpt):
        assert torch.equal(a, b)
    # The masks really were random: a different seed gives different gradients.
    torch.neuron.manual_seed(4)
    model.zero_grad()
    model(x).sum().backward()
    assert not torch.equal(model[0].weight.grad.cpu(), plain[2])


def test_checkpoint_matches_cpu():
    from torch.utils.checkpoint import checkpoint

    def run(device):
        torch.manual_seed(0)
        model = mlp().to(device)
        x = torch.randn(6, 10).to(device).requires_grad_()
        out = checkpoint(model, x, use_reentrant=False)
        out.pow(2).sum().backward()
        return [x.grad.cpu()] + [p.grad.cpu() for p in model.parameters()]

    for a, b in zip(run(DEV), run("cpu")):
        torch.testing.assert_close(a, b, **TOL)


# --- process exit ----------------------------------------------------------------------------


def test_script_ending_right_after_backward_exits_cleanly():
    """backward() runs on autograd's neuron device threads; a script that ends right after it
    must exit with 0, not abort while such a thread still holds the finished graph task (this
    aborted most of the time before torch_neuronx gave those threads the GIL at exit)."""
    import os
    import subprocess
    import sys

    code = (
        "import torch, torch_neuronx\n"
        "x = torch.randn(8, 8, device='neuron', requires_grad=True)\n"
        "(x @ x).sin().sum().backward()\n"
    )
    env = dict(os.environ, TORCH_NEURONX_FALLBACK_WARN="0")
    # One after another: with several interpreters starting at once the timing rarely hits the
    # race, alone it did nearly every time.
    codes = [
        subprocess.run(
            [sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, timeout=120,
        ).returncode
        for _ in range(3)
    ]
    assert codes == [0, 0, 0], codes


def test_backward_runs_on_the_calling_thread():
    # nrtsim executes host-synchronously, so on the thread that imported torch_neuronx backward
    # passes over neuron tensors run on the calling thread, as CPU ones do (no device thread).
    import threading

    def run():
        seen = []
        x = torch.randn(4, device="neuron", requires_grad=True)
        y = x.exp()
        y.register_hook(lambda g: seen.append(threading.get_ident()))
        y.sum().backward()
        torch.testing.assert_close(x.grad.cpu(), x.detach().cpu().exp())
        return seen

    assert run() == [threading.get_ident()]
    assert not torch.autograd.is_multithreading_enabled()
    out = {}
    worker = threading.Thread(target=lambda: out.update(seen=run(), me=threading.get_ident()))
    worker.start()
    worker.join()
    # A new thread has PyTorch's default (multithreading on): its backward runs on the device thread.
    assert len(out["seen"]) == 1 and out["seen"] != [out["me"]]
