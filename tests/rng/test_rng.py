"""Random number generation on neuron: seeding, the 16-byte (seed, offset) state, replay, explicit
generators, distributions, fork_rng, CPU-fallback random ops, and DTensor-style offset rewrites."""

import struct

import pytest
import torch

import torch_neuronx  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")

DEV = "neuron"


def state_fields(state: torch.Tensor) -> tuple:
    """(seed, offset) from a 16-byte neuron RNG state."""
    return struct.unpack("<QQ", bytes(state.tolist()))


def make_state(seed: int, offset: int) -> torch.Tensor:
    return torch.tensor(list(struct.pack("<QQ", seed, offset)), dtype=torch.uint8)


def draws():
    """One of every native random fill, returned on the CPU."""
    return [
        torch.randn(33, device=DEV),
        torch.rand(17, device=DEV),
        torch.randint(0, 1000, (9,), device=DEV),
        torch.bernoulli(torch.full((21,), 0.4, device=DEV)),
        torch.empty(6, device=DEV).normal_(2.0, 3.0),
        torch.empty(7, device=DEV).uniform_(-5.0, 5.0),
        torch.empty(5, device=DEV).exponential_(),
        torch.nn.functional.dropout(torch.ones(40, device=DEV), 0.5),
    ]


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.device.type == DEV
        torch.testing.assert_close(x.cpu(), y.cpu(), rtol=0, atol=0)


# --- seeding ---------------------------------------------------------------------------------


def test_manual_seed_sets_initial_seed_and_resets_offset():
    torch.neuron.manual_seed(1234)
    assert torch.neuron.initial_seed() == 1234
    torch.randn(10, device=DEV)
    assert state_fields(torch.neuron.get_rng_state()) == (1234, 12)  # 10 rounded up to 4
    torch.neuron.manual_seed(1234)
    assert state_fields(torch.neuron.get_rng_state()) == (1234, 0)


def test_manual_seed_reproduces_and_different_seeds_differ():
    torch.neuron.manual_seed(7)
    first = draws()
    torch.neuron.manual_seed(7)
    assert_same(first, draws())
    torch.neuron.manual_seed(8)
    other = draws()
    assert not torch.equal(first[0].cpu(), other[0].cpu())
    assert not torch.equal(first[1].cpu(), other[1].cpu())


def test_successive_draws_differ():
    torch.neuron.manual_seed(0)
    a = torch.randn(64, device=DEV).cpu()
    b = torch.randn(64, device=DEV).cpu()
    assert not torch.equal(a, b)


def test_large_seed_round_trips():
    seed = 2**63 + 12345
    torch.neuron.manual_seed(seed)
    assert torch.neuron.initial_seed() == seed
    assert state_fields(torch.neuron.get_rng_state())[0] == seed


def test_manual_seed_all_seeds_every_device():
    n = torch.neuron.device_count()
    assert n >= 2
    torch.neuron.manual_seed_all(99)
    assert [state_fields(s) for s in torch.neuron.get_rng_state_all()] == [(99, 0)] * n


def test_manual_seed_seeds_only_current_device():
    torch.neuron.manual_seed_all(5)
    with torch.neuron.device(1):
        torch.neuron.manual_seed(6)
        assert torch.neuron.initial_seed() == 6
    assert torch.neuron.initial_seed() == 5
    assert state_fields(torch.neuron.get_rng_state(1)) == (6, 0)


def test_torch_manual_seed_also_seeds_neuron():
    torch.manual_seed(4321)
    assert [state_fields(s) for s in torch.neuron.get_rng_state_all()] == [
        (4321, 0)
    ] * torch.neuron.device_count()
    a = torch.randn(16, device=DEV).cpu()
    torch.manual_seed(4321)
    assert torch.equal(a, torch.randn(16, device=DEV).cpu())


def test_seed_and_seed_all_are_nondeterministic():
    torch.neuron.seed()
    s1 = torch.neuron.initial_seed()
    torch.neuron.seed()
    s2 = torch.neuron.initial_seed()
    assert s1 != s2
    torch.neuron.seed_all()
    seeds = {state_fields(s)[0] for s in torch.neuron.get_rng_state_all()}
    assert len(seeds) == 1 and seeds != {s2}


# --- state -----------------------------------------------------------------------------------


def test_get_rng_state_layout():
    torch.neuron.manual_seed(0x0102030405060708)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.shape == (16,)
    assert state[:8].tolist() == [8, 7, 6, 5, 4, 3, 2, 1]  # little-endian uint64 seed
    assert state[8:].tolist() == [0] * 8
    torch.rand(5, device=DEV)
    assert state_fields(torch.neuron.get_rng_state()) == (0x0102030405060708, 8)
    # get_rng_state returns a copy, not a live view of the generator
    assert state[8:].tolist() == [0] * 8


def test_set_rng_state_replays_every_random_op():
    torch.neuron.manual_seed(11)
    torch.randn(3, device=DEV)  # start from a non-zero offset
    saved = torch.neuron.get_rng_state()
    first = draws()
    after = torch.neuron.get_rng_state()
    torch.neuron.set_rng_state(saved)
    assert_same(first, draws())
    assert torch.equal(torch.neuron.get_rng_state(), after)


def test_set_rng_state_per_device():
    torch.neuron.manual_seed_all(3)
    saved = torch.neuron.get_rng_state(1)
    a = torch.randn(20, device="neuron:1").cpu()
    # The tensor's device's generator moves, not the current device's.
    assert state_fields(torch.neuron.get_rng_state(0)) == (3, 0)
    assert state_fields(torch.neuron.get_rng_state(1)) == (3, 20)
    torch.neuron.set_rng_state(saved, "neuron:1")
    assert torch.equal(a, torch.randn(20, device="neuron:1").cpu())
    # Same seed and offset on another device give the same stream.
    assert torch.equal(a, torch.randn(20, device="neuron:0").cpu())


def test_set_rng_state_all_round_trip():
    torch.neuron.manual_seed_all(21)
    states = torch.neuron.get_rng_state_all()
    a = [torch.rand(8, device=f"neuron:{i}").cpu() for i in range(2)]
    torch.neuron.set_rng_state_all(states)
    b = [torch.rand(8, device=f"neuron:{i}").cpu() for i in range(2)]
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_set_rng_state_rejects_bad_state():
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.neuron.set_rng_state(torch.zeros(8, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="ByteTensor"):
        torch.neuron.set_rng_state(torch.zeros(16, dtype=torch.int32))


def test_dtensor_style_offset_rewrite():
    """DTensor's OffsetBasedRNGTracker reads the state, rewrites the offset (bytes 8..15) and sets
    it back; the stream must continue from exactly that offset."""
    torch.neuron.manual_seed(2024)
    first = torch.randn(8, device=DEV).cpu()
    second = torch.randn(8, device=DEV).cpu()
    third = torch.randn(8, device=DEV).cpu()

    state = torch.neuron.get_rng_state()
    seed, offset = state_fields(state)
    assert (seed, offset) == (2024, 24)
    # As the tracker does it: view the offset bytes as int64 and overwrite them in place.
    state[8:].view(torch.int64)[0] = 8
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.randn(8, device=DEV).cpu(), second)
    assert state_fields(torch.neuron.get_rng_state()) == (2024, 16)

    torch.neuron.set_rng_state(make_state(2024, 0))
    assert torch.equal(torch.randn(8, device=DEV).cpu(), first)
    torch.neuron.set_rng_state(make_state(2024, 16))
    assert torch.equal(torch.randn(8, device=DEV).cpu(), third)
    torch.neuron.set_rng_state(make_state(2024, 12))  # a different offset: a different stream
    assert not torch.equal(torch.randn(8, device=DEV).cpu(), third)


# --- explicit generators ---------------------------------------------------------------------


def test_generator_on_neuron_is_reproducible():
    g = torch.Generator(device=DEV)
    assert g.device == torch.device("neuron", 0)
    g.manual_seed(42)
    a = torch.randn(4, 5, generator=g, device=DEV)
    b = torch.rand(10, generator=g, device=DEV)
    assert a.device.type == DEV and a.shape == (4, 5)
    g.manual_seed(42)
    assert torch.equal(a.cpu(), torch.randn(4, 5, generator=g, device=DEV).cpu())
    assert torch.equal(b.cpu(), torch.rand(10, generator=g, device=DEV).cpu())
    g.manual_seed(43)
    assert not torch.equal(a.cpu(), torch.randn(4, 5, generator=g, device=DEV).cpu())


def test_generator_leaves_default_generator_alone():
    torch.neuron.manual_seed(1)
    before = torch.neuron.get_rng_state()
    g = torch.Generator(device=DEV).manual_seed(1)
    x = torch.randn(100, generator=g, device=DEV)
    assert torch.equal(torch.neuron.get_rng_state(), before)
    # Same (seed, offset) as the default generator: same numbers.
    assert torch.equal(x.cpu(), torch.randn(100, device=DEV).cpu())


def test_generator_state_round_trip():
    g = torch.Generator(device=DEV).manual_seed(77)
    torch.rand(3, generator=g, device=DEV)
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    assert state_fields(state) == (77, 4)
    a = torch.randint(0, 100, (50,), generator=g, device=DEV).cpu()
    g.set_state(state)
    assert torch.equal(a, torch.randint(0, 100, (50,), generator=g, device=DEV).cpu())


def test_cpu_generator_rejected_for_native_random_op():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(RuntimeError, match="neuron generator"):
        torch.randn(3, device=DEV, generator=g)


# --- distributions ---------------------------------------------------------------------------


def test_distribution_sanity():
    torch.neuron.manual_seed(0)
    n = 200_000
    x = torch.randn(n, device=DEV).cpu()
    assert abs(x.mean().item()) < 0.01 and abs(x.std().item() - 1) < 0.01

    y = torch.empty(n, device=DEV).normal_(3.0, 0.5).cpu()
    assert abs(y.mean().item() - 3.0) < 0.01 and abs(y.std().item() - 0.5) < 0.01

    u = torch.rand(n, device=DEV).cpu()
    assert u.min().item() >= 0.0 and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.01

    v = torch.empty(n, device=DEV).uniform_(-2.0, 6.0).cpu()
    assert v.min().item() >= -2.0 and v.max().item() < 6.0 and abs(v.mean().item() - 2.0) < 0.05

    r = torch.randint(3, 9, (n,), device=DEV).cpu()
    assert r.dtype == torch.int64
    assert r.min().item() == 3 and r.max().item() == 8
    counts = torch.bincount(r - 3).float() / n
    assert torch.allclose(counts, torch.full((6,), 1 / 6), atol=0.01)

    for p in (0.1, 0.7):
        b = torch.bernoulli(torch.full((n,), p, device=DEV)).cpu()
        assert set(b.unique().tolist()) <= {0.0, 1.0}
        assert abs(b.mean().item() - p) < 0.01
    b = torch.empty(n, device=DEV).bernoulli_(0.25).cpu()
    assert abs(b.mean().item() - 0.25) < 0.01


def test_dropout_keeps_expected_fraction_and_scale():
    torch.neuron.manual_seed(0)
    x = torch.ones(100_000, device=DEV)
    y = torch.nn.functional.dropout(x, 0.3).cpu()
    values = y.unique().tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(1 / 0.7)
    assert abs((y == 0).float().mean().item() - 0.3) < 0.01
    # eval mode: identity, and no randomness drawn
    before = torch.neuron.get_rng_state()
    assert torch.equal(torch.nn.functional.dropout(x, 0.3, training=False).cpu(), x.cpu())
    assert torch.equal(torch.neuron.get_rng_state(), before)


def test_dropout_is_governed_by_neuron_seed():
    def run():
        torch.neuron.manual_seed(5)
        return torch.nn.Dropout(0.5)(torch.ones(64, device=DEV)).cpu()

    a = run()
    torch.manual_seed(12345)  # reseeds the CPU too; must not matter...
    torch.neuron.manual_seed(5)
    b = torch.nn.Dropout(0.5)(torch.ones(64, device=DEV)).cpu()
    assert torch.equal(a, b)
    # ...and neither must drawing from the CPU generator in between.
    torch.neuron.manual_seed(5)
    torch.rand(100)
    assert torch.equal(a, torch.nn.Dropout(0.5)(torch.ones(64, device=DEV)).cpu())


def test_dropout_backward_matches_mask():
    torch.neuron.manual_seed(9)
    x = torch.randn(256, device=DEV, requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.25)
    y.sum().backward()
    kept = (y.detach().cpu() != 0).float()
    torch.testing.assert_close(x.grad.cpu(), kept / 0.75)


# --- fork_rng --------------------------------------------------------------------------------


def test_fork_rng_restores_state():
    torch.neuron.manual_seed(31)
    before = torch.neuron.get_rng_state()
    expected = torch.randn(10, device=DEV).cpu()
    torch.neuron.set_rng_state(before)
    with torch.random.fork_rng(devices=[0], device_type="neuron"):
        torch.neuron.manual_seed(1)
        torch.randn(1000, device=DEV)
    assert torch.equal(torch.neuron.get_rng_state(), before)
    assert torch.equal(torch.randn(10, device=DEV).cpu(), expected)


def test_fork_rng_all_devices():
    torch.neuron.manual_seed_all(8)
    before = torch.neuron.get_rng_state_all()
    with torch.random.fork_rng(
        devices=range(torch.neuron.device_count()), device_type="neuron"
    ):
        for i in range(torch.neuron.device_count()):
            torch.rand(10, device=f"neuron:{i}")
    after = torch.neuron.get_rng_state_all()
    assert all(torch.equal(a, b) for a, b in zip(before, after))


# --- random ops served by the CPU fallback ---------------------------------------------------


@pytest.mark.parametrize(
    "name,op",
    [
        ("randperm", lambda g: torch.randperm(50, device=DEV, generator=g)),
        ("multinomial", lambda g: torch.multinomial(torch.ones(30, device=DEV), 10, generator=g)),
        (
            "normal_tensor",
            lambda g: torch.normal(torch.zeros(20, device=DEV), torch.ones(20, device=DEV), generator=g),
        ),
        ("poisson", lambda g: torch.poisson(torch.full((20,), 4.0, device=DEV), generator=g)),
    ],
)
def test_fallback_random_ops_follow_generator(name, op):
    g = torch.Generator(device=DEV)
    g.manual_seed(3)
    a = op(g)
    assert a.device.type == DEV
    offset_after_first = state_fields(g.get_state())[1]
    assert offset_after_first > 0  # the fallback drew from the neuron generator
    g.manual_seed(3)
    assert torch.equal(a.cpu(), op(g).cpu())
    g.manual_seed(4)
    assert not torch.equal(a.cpu(), op(g).cpu())


@pytest.mark.parametrize(
    "op",
    [
        lambda: torch.randperm(50, device=DEV),
        lambda: torch.multinomial(torch.ones(30, device=DEV), 10),
        lambda: torch.normal(torch.zeros(20, device=DEV), torch.ones(20, device=DEV)),
        lambda: torch.nn.functional.rrelu(-torch.ones(20, device=DEV), training=True),
    ],
    ids=["randperm", "multinomial", "normal_tensor", "rrelu"],
)
def test_fallback_random_ops_follow_default_generator(op):
    """Without an explicit generator a fallback op draws from neuron's default generator, not the
    CPU's: seeding neuron reproduces it, and CPU draws in between do not disturb it."""
    torch.neuron.manual_seed(17)
    a = op().cpu()
    assert state_fields(torch.neuron.get_rng_state())[1] > 0
    torch.neuron.manual_seed(17)
    torch.rand(10)  # advances the CPU generator only
    assert torch.equal(a, op().cpu())
    torch.neuron.manual_seed(18)
    assert not torch.equal(a, op().cpu())


def test_randperm_is_a_permutation():
    g = torch.Generator(device=DEV).manual_seed(0)
    p = torch.randperm(1000, device=DEV, generator=g).cpu()
    assert torch.equal(p.sort().values, torch.arange(1000))
    assert not torch.equal(p, torch.arange(1000))


def test_multinomial_respects_weights():
    torch.neuron.manual_seed(0)
    w = torch.tensor([0.0, 1.0, 0.0, 3.0], device=DEV)
    s = torch.multinomial(w, 20_000, replacement=True).cpu()
    assert set(s.unique().tolist()) == {1, 3}
    assert abs((s == 3).float().mean().item() - 0.75) < 0.02


def test_seeding_before_runtime_start(python_subprocess):
    """torch.manual_seed at the top of a script must not start the runtime (a DataLoader may
    fork later), and must still govern the first neuron draws once it starts."""
    result = python_subprocess(
        """
        import torch, torch_neuronx
        torch.manual_seed(5)
        torch.neuron.manual_seed_all(6)
        assert not torch_neuronx.is_neuron_runtime_initialized()
        assert torch.neuron.initial_seed() == 6
        a = torch.randn(16, device="neuron").cpu()
        torch.neuron.manual_seed_all(6)
        b = torch.randn(16, device="neuron").cpu()
        assert torch.equal(a, b)
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float64, torch.complex64], ids=str
)
def test_randn_dtypes(dtype):
    torch.neuron.manual_seed(0)
    x = torch.randn(50_000, dtype=dtype, device=DEV)
    assert x.dtype == dtype
    torch.neuron.manual_seed(0)
    assert torch.equal(x.cpu(), torch.randn(50_000, dtype=dtype, device=DEV).cpu())
    x = x.cpu()
    if dtype.is_complex:  # unit variance overall: 1/2 in each of the real and imaginary parts
        assert abs(x.real.var().item() - 0.5) < 0.02 and abs(x.imag.var().item() - 0.5) < 0.02
    else:
        assert abs(x.double().std().item() - 1) < 0.02 and abs(x.double().mean().item()) < 0.02


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_rand_low_precision_stays_below_one(dtype):
    torch.neuron.manual_seed(0)
    u = torch.rand(100_000, dtype=dtype, device=DEV).cpu()
    assert u.dtype == dtype and u.min().item() >= 0 and u.max().item() < 1


def test_randint_dtypes_and_wide_ranges():
    torch.neuron.manual_seed(0)
    small = torch.randint(-5, 5, (20_000,), dtype=torch.int8, device=DEV).cpu()
    assert small.dtype == torch.int8 and small.unique().tolist() == list(range(-5, 5))
    flags = torch.randint(0, 2, (20_000,), dtype=torch.bool, device=DEV).cpu()
    assert abs(flags.float().mean().item() - 0.5) < 0.02
    wide = torch.randint(0, 2**40, (1000,), device=DEV).cpu()
    assert wide.min().item() >= 0 and wide.max().item() < 2**40 and wide.max().item() > 2**39


def test_generator_on_another_device():
    g = torch.Generator(device="neuron:1").manual_seed(9)
    assert g.device == torch.device("neuron", 1)
    before = torch.neuron.get_rng_state_all()
    a = torch.randn(6, device="neuron:1", generator=g)
    assert a.device == torch.device("neuron", 1)
    assert all(torch.equal(x, y) for x, y in zip(before, torch.neuron.get_rng_state_all()))
    g.manual_seed(9)
    assert torch.equal(a.cpu(), torch.randn(6, device="neuron:1", generator=g).cpu())


def test_native_dropout_matches_cpu_contract():
    torch.neuron.manual_seed(1)
    x = torch.randn(6, 8, device=DEV).t()  # non-contiguous input
    y, mask = torch.native_dropout(x, 0.4, True)
    assert mask.dtype == torch.bool and mask.shape == x.shape and y.shape == x.shape
    torch.testing.assert_close(y.cpu(), x.cpu() * mask.cpu() / 0.6)
    h = torch.randn(64, dtype=torch.float16, device=DEV)
    yh = torch.nn.functional.dropout(h, 0.5)
    assert yh.dtype == torch.float16
    torch.testing.assert_close(yh.cpu(), h.cpu() * (yh.cpu() != 0) * 2)
    y_eval, mask_eval = torch.native_dropout(x, 0.4, False)
    assert torch.equal(y_eval.cpu(), x.cpu()) and bool(mask_eval.all())
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        torch.native_dropout(x, 1.5, True)
