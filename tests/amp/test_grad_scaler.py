"""torch.amp.GradScaler("neuron"): the unscale/inf-check and scale-update kernels, and whole
training steps, checked against GradScaler("cpu") step for step."""

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

pytestmark = pytest.mark.filterwarnings(
    "ignore:Operator .* executed via CPU fallback", "ignore:An output with one or more elements"
)

DEV = "neuron"


# --- the two kernels -------------------------------------------------------------------------


@pytest.mark.parametrize("poison", [None, float("inf"), float("-inf"), float("nan")])
def test_non_finite_check_and_unscale_matches_cpu(poison):
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(5, 3, generator=g), torch.randn(7, generator=g), torch.randn(2, 2, generator=g)]
    if poison is not None:
        grads[1][4] = poison
    grads_n = [t.to(DEV) for t in grads]
    found, found_n = torch.zeros(1), torch.zeros(1, device=DEV)
    inv, inv_n = torch.full((1,), 0.25), torch.full((1,), 0.25, device=DEV)

    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    torch._amp_foreach_non_finite_check_and_unscale_(grads_n, found_n, inv_n)
    assert found_n.item() == (0.0 if poison is None else 1.0)
    assert torch.equal(found_n.cpu(), found)
    for a, b in zip(grads_n, grads):
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)


def test_non_finite_check_handles_mixed_dtypes_and_views():
    base = torch.randn(6, 4)
    grads = [base[:, 1], base.t()[2], torch.randn(3, dtype=torch.float16)]
    base_n = base.to(DEV)
    grads_n = [base_n[:, 1], base_n.t()[2], grads[2].to(DEV)]
    found, found_n = torch.zeros(1), torch.zeros(1, device=DEV)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.full((1,), 0.5))
    torch._amp_foreach_non_finite_check_and_unscale_(grads_n, found_n, torch.full((1,), 0.5, device=DEV))
    torch.testing.assert_close(base_n.cpu(), base, rtol=0, atol=0)
    torch.testing.assert_close(grads_n[2].cpu(), grads[2], rtol=0, atol=0)
    assert found_n.item() == 0.0


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("tracker", [0, 2])
def test_update_scale_matches_cpu(found_inf, tracker):
    def run(device):
        scale = torch.full((1,), 1024.0, device=device)
        growth = torch.full((1,), tracker, dtype=torch.int32, device=device)
        found = torch.full((1,), found_inf, device=device)
        torch._amp_update_scale_(scale, growth, found, 2.0, 0.5, 3)
        return scale.cpu(), growth.cpu()

    (s_cpu, g_cpu), (s_n, g_n) = run("cpu"), run(DEV)
    assert torch.equal(s_n, s_cpu) and torch.equal(g_n, g_cpu)
    # Known answers: backoff on inf; growth when the tracker reaches the interval.
    expected = 512.0 if found_inf else (2048.0 if tracker == 2 else 1024.0)
    assert s_n.item() == expected


def test_kernels_reject_mixed_devices():
    g = [torch.randn(3, device=DEV)]
    with pytest.raises(RuntimeError, match="found_inf is on cpu"):
        torch._amp_foreach_non_finite_check_and_unscale_(g, torch.zeros(1), torch.ones(1, device=DEV))
    with pytest.raises(RuntimeError, match="growth_tracker"):
        torch._amp_update_scale_(
            torch.ones(1, device=DEV),
            torch.zeros(1, dtype=torch.int32),
            torch.zeros(1, device=DEV),
            2.0,
            0.5,
            1,
        )


# --- training steps --------------------------------------------------------------------------


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def train(device, steps, poison_steps=(), growth_interval=2, optimizer=torch.optim.SGD, **scaler_kw):
    model = make_model().to(device)
    opt = optimizer(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**12, growth_interval=growth_interval, **scaler_kw)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=g).to(device)
    y = torch.randn(32, 2, generator=g).to(device)
    history = []
    for step in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        if step in poison_steps:
            model[0].weight.grad[0, 0] = float("inf")
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        changed = any(
            not torch.equal(a.cpu(), p.detach().cpu()) for a, p in zip(before, model.parameters())
        )
        history.append((scaler.get_scale(), changed, loss.item()))
    return history, [p.detach().cpu() for p in model.parameters()], scaler


def assert_same_run(a, b):
    hist_a, params_a, _ = a
    hist_b, params_b, _ = b
    assert [h[:2] for h in hist_a] == [h[:2] for h in hist_b]
    for (_, _, la), (_, _, lb) in zip(hist_a, hist_b):
        assert la == pytest.approx(lb, rel=1e-5)
    for pa, pb in zip(params_a, params_b):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)


def test_scaler_is_enabled_on_neuron():
    scaler = torch.amp.GradScaler(DEV)
    assert scaler.is_enabled()
    assert scaler.scale(torch.ones(1, device=DEV)).device.type == DEV


def test_training_matches_cpu_scaler():
    assert_same_run(train(DEV, 6), train("cpu", 6))


def test_training_with_adamw_matches_cpu_scaler():
    assert_same_run(
        train(DEV, 5, poison_steps={2}, optimizer=torch.optim.AdamW),
        train("cpu", 5, poison_steps={2}, optimizer=torch.optim.AdamW),
    )


def test_training_with_fused_adamw_matches_cpu_scaler():
    """fused=True hands grad_scale and found_inf to the fused kernel instead of unscaling first."""
    fused = lambda params, lr: torch.optim.AdamW(params, lr=lr, fused=True)  # noqa: E731
    assert_same_run(
        train(DEV, 5, poison_steps={3}, optimizer=fused),
        train("cpu", 5, poison_steps={3}, optimizer=fused),
    )


def test_inf_gradient_skips_step_and_backs_off():
    hist, _, _ = train(DEV, 4, poison_steps={1}, growth_interval=100)
    scales = [h[0] for h in hist]
    changed = [h[1] for h in hist]
    assert scales == [4096.0, 2048.0, 2048.0, 2048.0]
    assert changed == [True, False, True, True]
    assert_same_run(train(DEV, 4, poison_steps={1}, growth_interval=100),
                    train("cpu", 4, poison_steps={1}, growth_interval=100))


def test_scale_grows_after_growth_interval():
    hist, _, scaler = train(DEV, 7, growth_interval=3)
    assert [h[0] for h in hist] == [4096.0, 4096.0, 8192.0, 8192.0, 8192.0, 16384.0, 16384.0]
    assert scaler._growth_tracker.device.type == DEV and scaler._scale.device.type == DEV
    assert scaler._growth_tracker.item() == 1


def test_growth_tracker_resets_on_inf():
    hist, _, _ = train(DEV, 6, poison_steps={1}, growth_interval=2)
    # 4096, inf -> 2048 (tracker 0), two good steps -> 4096, two more -> 8192
    assert [h[0] for h in hist] == [4096.0, 2048.0, 2048.0, 4096.0, 4096.0, 8192.0]


def test_unscale_then_clip_matches_cpu():
    def run(device):
        model = make_model().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=256.0)
        x = torch.ones(4, 8, device=device)
        loss = model(x).pow(2).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        grads = [p.grad.cpu() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        return norm.cpu(), grads, [p.detach().cpu() for p in model.parameters()]

    (n_c, g_c, p_c), (n_n, g_n, p_n) = run("cpu"), run(DEV)
    torch.testing.assert_close(n_n, n_c, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_n + p_n, g_c + p_c):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_autocast_training_step_matches_cpu_autocast():
    """bf16 autocast + GradScaler, neuron vs CPU: linear runs in bf16 and mse_loss in fp32 under
    both devices' lists, so the steps agree to bf16 accuracy."""

    def run(device):
        model = make_model().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler(device, init_scale=1024.0)
        g = torch.Generator().manual_seed(2)
        x = torch.randn(16, 8, generator=g).to(device)
        y = torch.randn(16, 2, generator=g).to(device)
        for _ in range(3):
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.bfloat16):
                out = model(x)
                assert out.dtype == torch.bfloat16
                loss = F.mse_loss(out.float(), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return scaler.get_scale(), [p.detach().cpu() for p in model.parameters()]

    (s_c, p_c), (s_n, p_n) = run("cpu"), run(DEV)
    assert s_n == s_c
    for a, b in zip(p_n, p_c):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def test_state_dict_round_trip():
    _, _, scaler = train(DEV, 3, growth_interval=2)
    state = scaler.state_dict()
    assert state["scale"] == scaler.get_scale() and state["_growth_tracker"] == 1
    fresh = torch.amp.GradScaler(DEV)
    fresh.load_state_dict(state)
    assert fresh.get_scale() == scaler.get_scale()
    assert fresh.get_growth_interval() == 2


def test_scaler_on_another_device():
    """Model on neuron:1 while neuron:0 is current: the scale, the tracker and both kernels stay
    on neuron:1, and the steps match the CPU's."""

    def run(device):
        model = make_model().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler(torch.device(device).type, init_scale=1024.0, growth_interval=1)
        x = torch.ones(4, 8, device=device)
        for _ in range(3):
            opt.zero_grad()
            scaler.scale(model(x).pow(2).sum()).backward()
            scaler.step(opt)
            scaler.update()
        return scaler, [p.detach().cpu() for p in model.parameters()]

    assert torch.neuron.current_device() == 0
    (s_n, p_n), (s_c, p_c) = run("neuron:1"), run("cpu")
    assert s_n._scale.device == s_n._growth_tracker.device == torch.device("neuron", 1)
    assert s_n.get_scale() == s_c.get_scale() == 8192.0
    for a, b in zip(p_n, p_c):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
