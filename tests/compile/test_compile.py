"""torch.compile(backend="neuron"): compiled programs against eager execution on neuron (which
the eager suites check against the CPU) on the same inputs, the program's one launch record, the
compile metrics and the error contract.

Tolerances: a compiled program computes in float32 like eager, but Inductor may fuse and reorder
reductions. Summing n float32 terms in two orders differs by at most about 2*n*eps*sum|terms|;
each check states the longest accumulation it covers and bounds by that over the reference's
magnitude.
"""

import copy
import operator
import warnings

import pytest
import torch

import torch_neuronx

EPS = torch.finfo(torch.float32).eps


def assert_close(actual, expected, terms):
    """Equal up to reordering a float32 sum of `terms` terms (see the module docstring)."""
    assert actual.device == expected.device, (actual.device, expected.device)
    a = actual.detach().cpu().double()
    e = expected.detach().cpu().double()
    scale = max(1.0, e.abs().max().item())
    bound = 2 * terms * EPS * scale
    worst = (a - e).abs().max().item() if e.numel() else 0.0
    assert worst <= bound, f"max difference {worst} exceeds {bound} ({terms} terms, scale {scale})"


def mlp(d_in=8, hidden=16, d_out=4):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, d_out)
    ).to("neuron")


def program_rows():
    return [r for r in torch_neuronx.kernel_trace() if r["kind"] == "program"]


def test_backend_listed_after_import_torch_alone(python_subprocess):
    result = python_subprocess(
        "import torch\n"
        "print('neuron' in torch._dynamo.list_backends())\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "True"


def test_device_interface_registered():
    from torch._dynamo.device_interface import get_interface_for_device

    torch.compile(lambda x: x + 1, backend="neuron")(torch.ones(2, device="neuron"))
    interface = get_interface_for_device("neuron")
    assert interface.device_count() == torch.neuron.device_count()
    assert interface.current_device() == torch.neuron.current_device()
    assert interface.get_raw_stream(0) == torch.neuron.current_stream(0).stream_id
    props = interface.get_device_properties(0)
    assert props.total_memory == torch.neuron.get_device_properties(0).total_memory


def test_mlp_training_step_matches_eager():
    eager = mlp()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="neuron")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    torch.manual_seed(1)
    x = torch.randn(6, 8).to("neuron")
    target = torch.randn(6, 4).to("neuron")
    for _ in range(2):
        losses = []
        for model, opt, run in ((eager, opt_e, eager), (compiled_model, opt_c, compiled)):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(run(x), target)
            loss.backward()
            losses.append(loss)
        # The longest sums: the loss over 6*4 elements, weight gradients over the batch of 6
        # times 16 hidden units.
        assert_close(losses[1], losses[0], terms=6 * 16)
        for pe, pc in zip(eager.parameters(), compiled_model.parameters()):
            assert pc.grad.device.type == "neuron"
            assert_close(pc.grad, pe.grad, terms=6 * 16)
        opt_e.step()
        opt_c.step()
        for pe, pc in zip(eager.parameters(), compiled_model.parameters()):
            assert_close(pc, pe, terms=6 * 16)
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs"] == 1 and m["recompiles"] == 0 and m["fallback_graphs"] == 0
    # forward and backward programs, each compiled once (or found in the cache).
    assert m["programs"] == 2 and m["cache_hits"] + m["cache_misses"] == 2
    assert m["program_launches"] == 4
    assert m["compile_seconds"] > 0


class TinyDecoderBlock(torch.nn.Module):
    """Embedding, layer norm, causal self-attention (SDPA) with a residual, LM head, loss: the
    op mix of a decoder language model, tiny."""

    def __init__(self, vocab=32, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.norm = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, ids, labels):
        x = self.emb(ids)
        b, t, d = x.shape
        qkv = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        logits = self.head(x)
        return torch.nn.functional.cross_entropy(logits.view(b * t, -1), labels.view(-1))


def test_decoder_block_training_step_fullgraph():
    torch.manual_seed(0)
    eager = TinyDecoderBlock().to("neuron")
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="neuron", fullgraph=True)
    b, t, d, vocab, heads = 2, 8, 16, 32, 2
    ids = torch.randint(0, vocab, (b, t)).to("neuron")
    labels = torch.randint(0, vocab, (b, t)).to("neuron")
    torch_neuronx.clear_kernel_trace()
    torch_neuronx.clear_op_tracking()
    loss_c = compiled(ids, labels)
    loss_c.backward()
    rows = {r["op"].rsplit("_", 1)[-1]: r for r in program_rows()}
    loss_e = eager(ids, labels)
    loss_e.backward()
    # Longest sums: the loss's mean over b*t tokens of log-sum-exp over the vocabulary, and
    # weight gradients summed over the b*t tokens of d (or vocab) features.
    assert_close(loss_c, loss_e, terms=b * t * vocab)
    for pe, pc in zip(eager.parameters(), compiled_model.parameters()):
        assert_close(pc.grad, pe.grad, terms=b * t * vocab)
    assert torch_neuronx.get_fallback_ops() == []
    # The forward program's FLOPs: every matmul of the block, 2*M*N*K each (the attention's
    # two batched products over b*heads (t x t) score blocks of head size d/heads).
    tokens, head_dim = b * t, d // heads
    matmuls = (
        2 * tokens * d * 3 * d  # qkv
        + 2 * 2 * (b * heads) * t * t * head_dim  # q @ k^T and scores @ v
        + 2 * tokens * d * d  # proj
        + 2 * tokens * d * vocab  # head
    )
    assert rows["forward"]["flops"] == matmuls
    assert rows["backward"]["launches"] == 1 and rows["backward"]["flops"] > matmuls


def test_one_program_record_per_call_with_graph_flops():
    b, d_in, hidden, d_out = 5, 8, 16, 4
    model = mlp(d_in, hidden, d_out)
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    x = torch.randn(b, d_in).to("neuron")
    with torch.no_grad():
        expected = model(x)
        compiled(x)  # compile outside the trace
        torch_neuronx.clear_kernel_trace()
        out1 = compiled(x)
        out2 = compiled(x)
    rows = torch_neuronx.kernel_trace()
    programs = [r for r in rows if r["kind"] == "program"]
    assert len(programs) == 1, rows
    row = programs[0]
    assert row["op"].startswith("neuron::program/") and row["op"].endswith("_inference")
    assert row["launches"] == 2
    # Both Linear layers' matmuls, 2*M*N*K each, per call.
    assert row["flops"] == 2 * (2 * b * d_in * hidden + 2 * b * hidden * d_out)
    assert row["ops"]["scalar"] == 2 * b * hidden  # tanh on the activation engine
    assert row["bytes_read"] > 0 and row["bytes_written"] == 2 * b * d_out * 4
    assert row["sim_ns"] > 0
    # The ops inside the program produce no records of their own.
    assert [r for r in rows if r["kind"] != "program"] == []
    for out in (out1, out2):
        assert out.device == x.device
        assert_close(out, expected, terms=hidden)


def test_profiler_and_simulated_clock_see_the_program():
    from torch.profiler import ProfilerActivity, profile

    model = mlp()
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(3, 8).to("neuron")
    with torch.no_grad():
        compiled(x)
        before = torch_neuronx.simulated_time(0)["now_ns"]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            compiled(x)
        after = torch_neuronx.simulated_time(0)["now_ns"]
    assert after > before
    device_events = [e for e in prof.events() if e.device_type != torch.autograd.DeviceType.CPU]
    # The profiler also draws the program's work on each engine it uses ("<name> (<engine>
    # engine)" spans, annotations linked to no op); apart from them, one device event: the
    # program, none for the ops inside it.
    spans = [e for e in device_events if e.name.endswith(" engine)")]
    device_events = [e for e in device_events if e not in spans]
    assert len(device_events) == 1, [e.name for e in device_events]
    assert spans and all(e.name.startswith(device_events[0].name + " (") for e in spans)
    assert device_events[0].name.startswith("neuron::program/")
    assert device_events[0].name.endswith("_inference")
    assert device_events[0].device_time > 0


def test_model_name_option_names_the_program():
    compiled = torch.compile(
        lambda x: x * 3 + 1, backend="neuron", options={"model_name": "tiny"}
    )
    x = torch.arange(6.0).to("neuron")
    torch_neuronx.clear_kernel_trace()
    out = compiled(x)
    assert torch.equal(out.cpu(), x.cpu() * 3 + 1)
    names = [r["op"] for r in program_rows()]
    assert len(names) == 1 and names[0].startswith("neuron::program/tiny_"), names


def test_program_runs_on_its_inputs_device_and_results_are_not_copied():
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two neuron devices")
    x = torch.randn(64, 64).to("neuron:1")
    f = torch.compile(lambda t: (t * 2, t + 1), backend="neuron")
    f(x)
    before = torch.neuron.memory_stats(1)["allocation_requests"]
    doubled, incremented = f(x)
    # One HBM block per result, allocated by the CPU code and taken over as is (a copy would
    # allocate a second block per result).
    assert torch.neuron.memory_stats(1)["allocation_requests"] - before == 2
    assert doubled.device == incremented.device == x.device
    assert torch.neuron.current_device() == 0
    assert torch.equal(doubled.cpu(), x.cpu() * 2)
    assert torch.equal(incremented.cpu(), x.cpu() + 1)


def test_outputs_aliasing_inputs_stay_views():
    def f(x):
        return x.t(), x * 2

    x = torch.arange(6.0).reshape(2, 3).to("neuron")
    t, doubled = torch.compile(f, backend="neuron")(x)
    assert t.device == x.device and t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert torch.equal(t.cpu(), x.cpu().t())
    assert torch.equal(doubled.cpu(), x.cpu() * 2)
    x.add_(1)  # t is a view of x, as in eager
    assert torch.equal(t.cpu(), x.cpu().t())


def test_saved_input_keeps_its_autograd_identity():
    """A forward program that returns an input unchanged (AOTAutograd saves x for the backward of
    x ** 3) hands back that input itself, as Inductor's code does. Through it a double backward
    reaches x and gets AOTAutograd's own answer, as on the CPU; a new alias of x instead cut the
    graph and surfaced as "the differentiated tensor ... not used in the graph"."""
    x = torch.randn(4, device="neuron", requires_grad=True)
    f = torch.compile(lambda t: (t ** 3).sum(), backend="neuron")
    (grad,) = torch.autograd.grad(f(x), x, create_graph=True)
    assert_close(grad, 3 * x.detach() ** 2, terms=1)
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        torch.autograd.grad(grad.sum(), x)


def test_input_mutation_writes_through_to_neuron_memory():
    def f(x, y):
        x.add_(y)
        return x * 2

    x = torch.arange(4.0).to("neuron")
    y = torch.ones(4).to("neuron")
    torch_neuronx.clear_kernel_trace()
    out = torch.compile(f, backend="neuron")(x, y)
    # The write into x happened inside the program (the CPU code writes through its host view).
    assert [r["kind"] for r in torch_neuronx.kernel_trace()] == ["program"]
    assert torch.equal(x.cpu(), torch.arange(4.0) + 1)
    assert torch.equal(out.cpu(), (torch.arange(4.0) + 1) * 2)


def test_mutation_through_views():
    def mutate_slice(x):
        x[1:].mul_(2)
        return x.sum()

    def return_mutated_view(base):
        return base.view(-1)[2:5].add_(10)

    x = torch.arange(6.0).reshape(3, 2).to("neuron")
    x_eager = x.clone()
    total = torch.compile(mutate_slice, backend="neuron")(x)
    assert torch.equal(total.cpu(), mutate_slice(x_eager).cpu())
    assert torch.equal(x.cpu(), x_eager.cpu())

    base = torch.zeros(2, 4).to("neuron")
    base_eager = base.clone()
    view = torch.compile(return_mutated_view, backend="neuron")(base)
    assert torch.equal(view.cpu(), return_mutated_view(base_eager).cpu())
    assert torch.equal(base.cpu(), base_eager.cpu())
    # Still a view of the input, as in eager.
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    base.fill_(1)
    assert torch.equal(view.cpu(), torch.ones(3))


def test_set_default_backend():
    previous = torch.compiler.get_default_backend()
    torch.compiler.set_default_backend("neuron")
    try:
        x = torch.arange(3.0).to("neuron")
        torch_neuronx.clear_kernel_trace()
        out = torch.compile(lambda t: t + 2)(x)
        assert torch.equal(out.cpu(), torch.arange(3.0) + 2)
        assert len(program_rows()) == 1
    finally:
        torch.compiler.set_default_backend(previous)


def test_dropout_in_a_program_is_seeded_and_differentiable():
    p = 0.5
    compiled = torch.compile(lambda t: torch.nn.functional.dropout(t, p), backend="neuron")
    x = (torch.rand(64, 32) + 1).to("neuron").requires_grad_()
    torch.manual_seed(3)
    a = compiled(x)
    torch.manual_seed(3)
    b = compiled(x)
    assert torch.equal(a.detach().cpu(), b.detach().cpu())  # the seed fixes the mask
    kept = a.detach().cpu() != 0
    # Each element is kept with probability 1-p: 2048 draws stay within 6 standard deviations.
    n = kept.numel()
    assert abs(kept.sum().item() - n * (1 - p)) <= 6 * (n * p * (1 - p)) ** 0.5
    # Kept elements are scaled by 1/(1-p) (exact: a power of two), and so is their gradient.
    assert torch.equal(a.detach().cpu()[kept], x.detach().cpu()[kept] / (1 - p))
    a.sum().backward()
    assert torch.equal(x.grad.cpu(), kept.float() / (1 - p))


def test_compiled_dropout_follows_the_eager_neuron_stream():
    # Two dropouts (reserving from the neuron generator in order) and a backward: the compiled
    # program draws the same masks as eager neuron at the same point of the stream, and leaves
    # the generator where eager leaves it.
    def f(t):
        h = torch.nn.functional.dropout(t, 0.25) * 3
        return torch.nn.functional.dropout(h.tanh(), 0.5)

    x = (torch.rand(16, 24) + 1).to("neuron").requires_grad_()
    results = {}
    for name, fn in (("eager", f), ("compiled", torch.compile(f, backend="neuron"))):
        torch.neuron.manual_seed(11)
        out = fn(x)
        out.sum().backward()
        results[name] = (out.detach().cpu(), x.grad.cpu().clone(), torch.neuron.get_rng_state())
        x.grad = None
    (out_e, grad_e, state_e), (out_c, grad_c, state_c) = results["eager"], results["compiled"]
    assert torch.equal(out_c != 0, out_e != 0)  # the same masks
    # Dropout's scaling is exact (powers of two and 4/3 applied as in eager); tanh may differ by
    # Inductor's vectorised tanh against ATen's: a few ulps.
    assert_close(out_c, out_e, terms=4)
    assert_close(grad_c, grad_e, terms=4)
    assert torch.equal(state_c, state_e)  # the stream advanced as in eager
    assert torch.neuron.get_dynamo_metrics()["program_launches"] == 2


def _random_ops(x):
    """Every random op eager neuron draws from its generator, as written in user code."""
    d = x.device
    return {
        "rand": torch.rand(3, 5, device=d),
        "randn": torch.randn(4, 2, device=d),
        "randint": torch.randint(3, 17, (2, 6), device=d),
        "randint_high": torch.randint(9, (5,), device=d),
        "rand_like": torch.rand_like(x),
        "randn_like": torch.randn_like(x) * 2,
        "randint_like": torch.randint_like(x, 4, 11),
        "bernoulli": torch.bernoulli(x.sigmoid()),
        "bernoulli_p": torch.bernoulli(x, 0.3),
        "uniform_": torch.empty_like(x).uniform_(-2, 3),
        "normal_": torch.empty(7, device=d).normal_(1.5, 0.5),
        "exponential_": torch.empty_like(x).exponential_(2.0),
        "bernoulli_tensor_": torch.empty_like(x).bernoulli_(x.sigmoid()),
    }


def test_random_ops_follow_the_eager_neuron_stream():
    # Random ops written in compiled code draw from the neuron generator as the eager kernels
    # do: the same values under the same seed, in the same order, and the generator left where
    # eager leaves it. The draws are ATen's CPU distributions on the same reservations, so the
    # values are equal exactly (the only arithmetic after the draws is a multiply by 2 and the
    # sigmoid of the probabilities, computed before the draws compare with them).
    x = torch.rand(4, 6).to("neuron")
    results = {}
    for name, fn in (("eager", _random_ops),
                     ("compiled", torch.compile(_random_ops, backend="neuron", fullgraph=True))):
        torch.neuron.manual_seed(5)
        out = fn(x)
        results[name] = ({k: v.cpu() for k, v in out.items()}, torch.neuron.get_rng_state())
    (eager, state_e), (compiled, state_c) = results["eager"], results["compiled"]
    assert torch.neuron.get_dynamo_metrics()["program_launches"] == 1
    for key, expected in eager.items():
        got = compiled[key]
        assert got.dtype == expected.dtype and got.shape == expected.shape, key
        if key.startswith("bernoulli"):
            # 0/1 draws compare the same uniform value with sigmoid(x), which Inductor's
            # vectorised sigmoid may round one ulp away from ATen's: a draw within an ulp of
            # its probability can flip (none in practice; at most one tolerated).
            assert (got != expected).sum().item() <= 1, key
        else:
            assert torch.equal(got, expected), key
    assert torch.equal(state_c, state_e)  # the stream advanced as in eager
    # And the values are random: reseeding changes them; repeating the seed repeats them.
    compiled_fn = torch.compile(_random_ops, backend="neuron", fullgraph=True)
    torch.neuron.manual_seed(6)
    other = compiled_fn(x)["rand"].cpu()
    assert not torch.equal(other, compiled["rand"])
    torch.neuron.manual_seed(5)
    assert torch.equal(compiled_fn(x)["rand"].cpu(), compiled["rand"])


def test_random_op_in_a_training_graph_is_drawn_once():
    # A random mask in the forward is saved for the backward, not drawn again there: the
    # gradient uses the forward's mask, and the stream advances by the forward's draws only.
    def f(t):
        return (t * torch.rand_like(t)).sum()

    x = torch.rand(8, 8).to("neuron").requires_grad_()
    grads, states = {}, {}
    for name, fn in (("eager", f), ("compiled", torch.compile(f, backend="neuron"))):
        torch.neuron.manual_seed(2)
        fn(x).backward()
        grads[name], states[name] = x.grad.cpu().clone(), torch.neuron.get_rng_state()
        x.grad = None
    assert torch.equal(grads["compiled"], grads["eager"])  # d/dt (t * r) = r, the same r
    assert torch.equal(states["compiled"], states["eager"])


def test_view_impossible_on_the_cpu_layout_becomes_a_reshape():
    # A backward program gets the saved tensors in the layouts the forward program produced,
    # which may differ from the traced ones (mamba2 in the causal-LM sweep): a view valid on the
    # traced layout but not on the actual one must still compile, as a reshape, to the same
    # values.
    from torch._subclasses.fake_tensor import FakeTensorMode

    from torch_neuronx.dynamo.backend import _CpuFakeTensorProp

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    flat = graph.call_function(torch.ops.aten.view.default, (x, [24]))
    graph.output((flat,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    with FakeTensorMode() as mode:
        transposed = torch.empty(6, 4).t()  # (4, 6), not viewable as (24,)
    _CpuFakeTensorProp(gm, mode=mode).propagate_dont_convert_inputs(transposed)
    assert flat.target is torch.ops.aten.reshape.default
    assert flat.meta["val"].shape == (24,)
    gm.recompile()  # as _graph_for_cpu does after propagating
    real = torch.arange(24.).view(6, 4).t()
    assert torch.equal(gm(real)[0], real.reshape(24))


def test_autocast_inside_the_compiled_region():
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8).to("neuron")
    x = torch.randn(4, 16).to("neuron")

    def f(t):
        with torch.autocast("neuron", dtype=torch.bfloat16):
            return layer(t)

    out = torch.compile(f, backend="neuron")(x)
    expected = f(x)
    assert out.dtype == expected.dtype == torch.bfloat16
    # Both round the same float32 accumulation of 16 products to bfloat16: at most one bfloat16
    # ulp apart where the float32 sums differ in their last bits.
    ulp = torch.finfo(torch.bfloat16).eps * expected.float().abs().cpu().clamp_min(1e-3)
    assert ((out.float() - expected.float()).abs().cpu() <= ulp).all()


def test_constants_and_repeated_outputs():
    def f(x):
        c = torch.tensor([1.0, 2.0, 3.0, 4.0], device="neuron")
        y = x * 2
        return x + c, c, y, y, x.shape[0] * 2

    x = torch.arange(4.0).to("neuron")
    shifted, constant, y1, y2, size = torch.compile(f, backend="neuron")(x)
    assert torch.equal(shifted.cpu(), torch.arange(4.0) + torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert constant.device == x.device and torch.equal(constant.cpu(), torch.arange(1.0, 5.0))
    assert y1.untyped_storage().data_ptr() == y2.untyped_storage().data_ptr()
    assert torch.equal(y1.cpu(), torch.arange(4.0) * 2) and size == 8


def test_graph_break_splits_into_programs():
    def f(x):
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()
        return y + x.sum()

    x = torch.linspace(-1, 1, 10).to("neuron")
    expected = f(x)
    torch_neuronx.clear_kernel_trace()
    out = torch.compile(f, backend="neuron")(x)
    # sin and a sum over 10 terms.
    assert_close(out, expected, terms=10)
    m = torch.neuron.get_dynamo_metrics()
    assert m["graph_breaks"] >= 1 and m["graphs"] == 2, m
    assert len(program_rows()) == 2

    torch._dynamo.reset()  # f's frame is cached with its graph break; recompile it
    with pytest.raises(Exception, match="graph_break"):
        torch.compile(f, backend="neuron", fullgraph=True)(x)


def test_dynamic_shapes_default_recompiles_once():
    def f(x):
        return torch.relu(x) * 2 - x.mean(dim=1, keepdim=True)

    compiled = torch.compile(f, backend="neuron")
    for batch in (3, 4, 5, 6):
        x = torch.randn(batch, 7).to("neuron")
        assert_close(compiled(x), f(x), terms=7)
    m = torch.neuron.get_dynamo_metrics()
    # The first shape compiles a static graph; the second a dynamic one that serves the rest.
    assert m["recompiles"] == 1, m
    assert "size mismatch" in m["recompile_reasons"][0]
    # TorchNeuron (static shapes only) would compile each of the 4 shapes: 3 recompiles.
    assert m["programs"] == 2 and m["torchneuron_programs"] == 4, m
    assert m["torchneuron_recompiles"] == 3, m
    compiled(torch.randn(5, 7).to("neuron"))  # a shape seen before costs nothing more
    assert torch.neuron.get_dynamo_metrics()["torchneuron_recompiles"] == 3


def test_static_shapes_recompile_per_shape():
    def f(x):
        return x * x + 1

    compiled = torch.compile(f, backend="neuron", dynamic=False)
    for n in (3, 4, 5):
        x = torch.randn(n).to("neuron")
        assert torch.equal(compiled(x).cpu(), (x * x + 1).cpu())
    m = torch.neuron.get_dynamo_metrics()
    assert m["recompiles"] == 2 and len(m["recompile_reasons"]) == 2, m
    assert m["torchneuron_recompiles"] == 2 and m["torchneuron_programs"] == m["programs"] == 3


@pytest.mark.parametrize("how", ["option", "env"])
def test_strict_static_shapes_compile_per_shape(monkeypatch, how):
    options = None
    if how == "env":
        monkeypatch.setenv("TORCH_NEURONX_STATIC_SHAPES", "1")
    else:
        options = {"static_shapes": True}
    torch.manual_seed(0)
    eager = torch.nn.Linear(7, 3).to("neuron")
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="neuron", options=options)
    for batch in (3, 4, 5, 4):
        x = torch.randn(batch, 7).to("neuron")
        out_c, out_e = compiled(x), eager(x)
        assert_close(out_c, out_e, terms=7)
        out_c.sum().backward()
        out_e.sum().backward()
        assert_close(compiled_model.weight.grad, eager.weight.grad, terms=batch * 3)
    m = torch.neuron.get_dynamo_metrics()
    # Shapes 3, 4, 5: three static compiles (forward and backward each), two recompiles; the
    # second batch of 4 reuses its program.
    assert m["recompiles"] == 2 and m["programs"] == 6, m
    assert m["torchneuron_recompiles"] == 2 and m["torchneuron_programs"] == 6, m
    assert any("new input shapes" in r for r in m["recompile_reasons"])

    torch._dynamo.reset()
    with pytest.raises(Exception, match="dynamic=True is not supported with static shapes"):
        torch.compile(lambda t: t + 1, backend="neuron", dynamic=True, options=options)(x)


def test_dynamic_program_flops_follow_the_call_sizes():
    w = torch.randn(6, 5).to("neuron")
    compiled = torch.compile(lambda x: x @ w, backend="neuron", dynamic=True)
    with torch.no_grad():
        for m_rows in (3, 9):
            x = torch.randn(m_rows, 6).to("neuron")
            torch_neuronx.clear_kernel_trace()
            out = compiled(x)
            assert_close(out, x @ w, terms=6)
            (row,) = program_rows()
            assert row["flops"] == 2 * m_rows * 6 * 5


def test_cpu_tensor_crossing_into_the_graph():
    def f(x_cpu, w):
        return torch.tanh(x_cpu.to("neuron") @ w)

    torch.manual_seed(2)
    x = torch.randn(4, 3)
    w = torch.randn(3, 2).to("neuron")
    out = torch.compile(f, backend="neuron")(x, w)
    assert out.device == w.device
    assert_close(out, f(x, w), terms=3)


def test_cpu_autocopy_can_be_disabled(monkeypatch):
    # TorchNeuron's TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1: a CPU tensor entering a neuron
    # graph raises, naming the input and the fix; a CPU scalar (0-dim) is still accepted.
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")

    def f(x_cpu, w, s):
        return torch.tanh(x_cpu.to("neuron") @ w) * s

    w = torch.randn(3, 2).to("neuron")
    with pytest.raises(Exception, match="x_cpu.*CPU tensor.*TORCH_NEURONX_DYNAMO_DISABLE_CPU"):
        torch.compile(f, backend="neuron")(torch.randn(4, 3), w, torch.tensor(2.0))
    torch._dynamo.reset()
    x = torch.randn(4, 3).to("neuron")
    out = torch.compile(f, backend="neuron")(x, w, torch.tensor(2.0))
    assert_close(out, f(x, w, torch.tensor(2.0)), terms=3)


def test_trainium_legality_float64_warned_and_in_metrics():
    def f(x):
        return (x.double() * 3).float().sum()

    x = torch.randn(8).to("neuron")
    with pytest.warns(UserWarning, match="(?s)would differ on Trainium.*float64 values"):
        out = torch.compile(f, backend="neuron")(x)
    assert_close(out, f(x), terms=8)
    m = torch.neuron.get_dynamo_metrics()
    assert m["trainium_flagged_programs"] == 1, m
    (entry,) = m["trainium_legality"]
    assert entry["issues"]["float64"]["count"] >= 2  # the double() and the product


def test_trainium_legality_int64_reported_not_warned():
    emb = torch.nn.Embedding(10, 4).to("neuron")
    ids = torch.tensor([1, 2, 3]).to("neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = torch.compile(lambda i: emb(i).sum(), backend="neuron")(ids)
    assert_close(out, emb(ids).sum(), terms=12)
    m = torch.neuron.get_dynamo_metrics()
    assert m["trainium_flagged_programs"] == 0
    issues = [e["issues"] for e in m["trainium_legality"]]
    assert any("int64" in i and set(i) == {"int64"} for i in issues), issues


def test_trainium_legality_ops_without_a_torchneuron_kernel_reported_not_warned():
    # median has no Neuron kernel in TorchNeuron 2.33 (its CPU fallback runs it in eager mode):
    # evidence that its compiler may not lower it, so in the metrics, without a warning.
    def f(x):
        return torch.median(x * 2) + torch.sin(x).sum()

    x = torch.randn(9).to("neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(f, backend="neuron", fullgraph=True)(x)
    assert not [w for w in caught if "Trainium" in str(w.message)]
    assert_close(out, f(x), terms=9)
    m = torch.neuron.get_dynamo_metrics()
    assert m["trainium_flagged_programs"] == 0
    (entry,) = m["trainium_legality"]
    assert set(entry["issues"]) == {"no_torchneuron_kernel"}, entry
    assert entry["issues"]["no_torchneuron_kernel"] == {"count": 1, "ops": ["median.default"]}


def test_trainium_legality_data_dependent_sizes():
    def f(x):
        return torch.masked_select(x, x > 0).sum()

    x = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0]).to("neuron")
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        with pytest.warns(UserWarning, match="data-dependent sizes"):
            out = torch.compile(f, backend="neuron", fullgraph=True)(x)
    assert out.item() == 9.0
    assert torch.neuron.get_dynamo_metrics()["trainium_flagged_programs"] == 1


def test_integer_histc_as_eager_neuron():
    # MoE routing counts tokens per expert with histc on integer ids: neuron has it (as CUDA),
    # the CPU kernel has floating types only; the program counts as the eager kernel does.
    def f(ids):
        return torch.histc(ids, bins=4, min=0, max=3) * 2

    ids = torch.tensor([0, 1, 1, 3, 3, 3, 2], dtype=torch.int32).to("neuron")
    out = torch.compile(f, backend="neuron", fullgraph=True)(ids)
    assert out.dtype == torch.int32
    assert torch.equal(out.cpu(), f(ids).cpu())
    assert out.cpu().tolist() == [2, 4, 2, 6]


def test_cpu_output_from_the_graph():
    def f(x):
        return (x * 2).cpu(), x + 1

    x = torch.arange(4.0).to("neuron")
    on_cpu, on_neuron = torch.compile(f, backend="neuron")(x)
    assert on_cpu.device.type == "cpu" and on_neuron.device == x.device
    assert torch.equal(on_cpu, torch.arange(4.0) * 2)
    assert torch.equal(on_neuron.cpu(), torch.arange(4.0) + 1)


def test_default_device_context():
    def f(n):
        return torch.ones(n, 2) * 3 + torch.arange(2.0)

    with torch.device("neuron"):
        out = torch.compile(f, backend="neuron")(4)
    assert out.device.type == "neuron"
    assert torch.equal(out.cpu(), torch.ones(4, 2) * 3 + torch.arange(2.0))


def test_mode_other_than_default_warns_and_compiles():
    x = torch.arange(3.0).to("neuron")
    with pytest.warns(UserWarning, match="mode='max-autotune' is not supported"):
        out = torch.compile(lambda t: t - 1, backend="neuron", mode="max-autotune")(x)
    assert torch.equal(out.cpu(), torch.arange(3.0) - 1)


_lib = torch.library.Library("neuron_compile_test", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
# Only a neuron kernel (computed with neuron ops), no CPU one: a program cannot run it.
_lib.impl("twice", lambda x: x + x, "PrivateUse1")


@torch.library.register_fake("neuron_compile_test::twice", lib=_lib)
def _twice_fake(x):
    return torch.empty_like(x)


def _uses_neuron_only_op(x):
    return torch.ops.neuron_compile_test.twice(x) + 1


def test_graph_that_cannot_compile_raises_naming_the_op(monkeypatch):
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    x = torch.arange(3.0).to("neuron")
    with pytest.raises(Exception, match="neuron_compile_test::twice.*no CPU or composite kernel"):
        torch.compile(_uses_neuron_only_op, backend="neuron")(x)


def test_device_only_aten_op_is_named():
    # ATen's overrideable convolution exists only for PrivateUse1 backends (no CPU kernel).
    def f(x, w):
        return torch.ops.aten.convolution_overrideable(x, w, None, [1], [0], [1], False, [0], 1)

    x = torch.randn(1, 2, 8).to("neuron")
    w = torch.randn(3, 2, 3).to("neuron")
    with pytest.raises(Exception, match="aten::convolution_overrideable"):
        torch.compile(f, backend="neuron")(x, w)


@pytest.mark.parametrize("how", ["env", "option"])
def test_graph_that_cannot_compile_falls_back_when_allowed(monkeypatch, how):
    options = None
    if how == "env":
        monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    else:
        monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1")
        options = {"fallback_execution": True}
    x = torch.arange(3.0).to("neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(_uses_neuron_only_op, backend="neuron", options=options)(x)
    assert any("runs eagerly" in str(w.message) for w in caught)
    assert torch.equal(out.cpu(), torch.arange(3.0) * 2 + 1)
    assert torch.neuron.get_dynamo_metrics()["fallback_graphs"] == 1


def test_metrics_api():
    assert torch_neuronx.get_dynamo_metrics is torch.neuron.get_dynamo_metrics
    assert torch_neuronx.reset_dynamo_metrics is torch.neuron.reset_dynamo_metrics
    torch.compile(lambda t: t * 5, backend="neuron")(torch.ones(2, device="neuron"))
    m = torch_neuronx.get_dynamo_metrics()
    assert m["graphs"] == 1 and m["programs"] == 1 and m["program_launches"] == 1
    m["graphs"] = 100  # a copy
    assert torch_neuronx.get_dynamo_metrics()["graphs"] == 1
    torch_neuronx.reset_dynamo_metrics()
    m = torch_neuronx.get_dynamo_metrics()
    assert m["graphs"] == 0 and m["recompile_reasons"] == [] and m["compile_seconds"] == 0.0


def test_program_launch_reuses_host_views_with_fresh_inputs():
    """The launch keeps one host view per argument position and re-points it each call: calls
    with other tensors (other storages, an input aliasing another, a view with an offset) compute
    on those tensors, and results of earlier calls stay intact."""
    def f(x, w):
        return torch.tanh(x @ w) + x.sum()

    compiled = torch.compile(f, backend="neuron", dynamic=False)
    kept = []
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(3, 5, generator=g)
        w = torch.randn(5, 5, generator=g)
        if seed == 2:
            base = torch.randn(40, generator=g).to("neuron")
            xn, wn = base[1:16].view(3, 5), base[15:40].view(5, 5)  # overlapping, offset views
            x, w = xn.cpu(), wn.cpu()
        else:
            xn, wn = x.to("neuron"), w.to("neuron")
        out = compiled(xn, wn)
        # tanh(x @ w): 5-term dot products; the sum of x: 15 terms.
        assert_close(out, f(x, w).to("neuron"), terms=20)
        kept.append((out, f(x, w)))
    for out, expected in kept:
        assert_close(out, expected.to("neuron"), terms=20)


def _threads_op():
    """A custom op whose CPU kernel reports the intra-op thread count it runs with."""
    if not hasattr(torch.ops, "neuron_test") or not hasattr(torch.ops.neuron_test, "threads"):
        lib = torch.library.Library("neuron_test", "FRAGMENT")
        lib.define("threads(Tensor x) -> Tensor")
        lib.impl("threads", lambda x: torch.full_like(x, torch.get_num_threads()), "CPU")
        lib.impl("threads", lambda x: torch.empty_like(x), "Meta")
        _threads_op.lib = lib  # keep the registration alive
    return torch.ops.neuron_test.threads


def test_programs_run_with_the_callers_intra_op_threads():
    """A program runs with the calling thread's intra-op threads, a tiny one (one-token decode
    sizes) as well as a large one, as Inductor's CPU code does; the count is unchanged after."""
    threads = _threads_op()
    previous = torch.get_num_threads()

    def f(x, w):
        return threads(x @ w)[0, :1]

    try:
        for count in (2, 1):
            torch.set_num_threads(count)
            for n, k in ((1, 64), (128, 128)):  # 8K and 4M FLOPs
                torch._dynamo.reset()
                compiled = torch.compile(f, backend="neuron", dynamic=False)
                x, w = torch.randn(n, k), torch.randn(k, k)
                assert compiled(x.to("neuron"), w.to("neuron")).item() == count
                assert torch.get_num_threads() == count
    finally:
        torch.set_num_threads(previous)


def test_multi_query_split_by_list_indices_backward():
    """Falcon's multi-query attention: key and value split off the fused projection with list
    indices (`qkv[..., [-2], :]`), one key/value head broadcast over the query heads. The
    backward accumulates into the fused gradient (index_put, accumulate=True) inside a 2-D tiled
    kernel; compiled for more than one thread, torch 2.13's Inductor offsets that store twice
    (inductor_fixes.py). Two threads at compile time make the kernel take that path on any host."""
    b, s, heads, d, width = 2, 8, 4, 16, 64

    def loss_of(h, w, mask):
        qkv = (h @ w).view(b, s, heads + 2, d)
        q, k, v = qkv[..., :-2, :], qkv[..., [-2], :], qkv[..., [-1], :]
        q = q.transpose(1, 2).reshape(b, heads, s, d)
        k, v = (x.transpose(1, 2).reshape(b, 1, s, d) for x in (k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.square().sum()

    torch.manual_seed(0)
    h = torch.randn(b, s, width, device="neuron")
    w_eager = torch.randn(width, (heads + 2) * d, device="neuron", requires_grad=True)
    w_compiled = w_eager.detach().clone().requires_grad_()
    mask = torch.ones(s, s, dtype=torch.bool, device="neuron").tril()[None, None]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch._dynamo.reset()
        loss_c = torch.compile(loss_of, backend="neuron", fullgraph=True)(h, w_compiled, mask)
        loss_c.backward()
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
    loss_e = loss_of(h, w_eager, mask)
    loss_e.backward()
    # The weight gradient sums over the b*s tokens, each a key/value gradient summed over the
    # query heads and the s queries.
    assert_close(loss_c, loss_e, terms=b * s * heads * d)
    assert_close(w_compiled.grad, w_eager.grad, terms=b * s * heads * s)


def _attention_block(x, mask, wq, wo):
    q = (x @ wq).view(1, -1, 2, 8).transpose(1, 2)  # (1, heads 2, length, 8)
    attn = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    return torch.relu(attn.transpose(1, 2).reshape(1, -1, 16) @ wo)


def _attention_inputs(length=6):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, length, 16, generator=g)
    mask = torch.zeros(length, length).masked_fill_(
        torch.ones(length, length, dtype=torch.bool).triu_(1), float("-inf"))
    wq, wo = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)
    return [t.to("neuron") for t in (x, mask, wq, wo)]


@pytest.mark.parametrize("how", ["default", "option off", "env off"])
def test_inference_programs_call_their_kernels_from_cpp(monkeypatch, how):
    """An inference program (no grad: a decode step) is compiled in Inductor's C++ wrapper mode
    unless turned off (TORCH_NEURONX_CPP_WRAPPER=0 or options={"cpp_wrapper": False}); its
    fused attention becomes ATen's CPU op, which that wrapper calls through its C shim. The
    results are eager neuron's either way."""
    options = {"cpp_wrapper": False} if how == "option off" else {}
    if how == "env off":
        monkeypatch.setenv("TORCH_NEURONX_CPP_WRAPPER", "0")
    inputs = _attention_inputs()
    compiled = torch.compile(_attention_block, backend="neuron", options=options)
    with torch.no_grad():
        out = compiled(*inputs)
        expected = _attention_block(*inputs)
    # Projections of 16 terms, then attention over 6 keys of 8 dimensions: 16 + 6 * 8 + 16 terms.
    assert_close(out, expected, terms=80)
    m = torch.neuron.get_dynamo_metrics()
    assert m["programs"] == 1, m
    assert m["cpp_wrapper_programs"] == (1 if how == "default" else 0), m
    # A C++ wrapper program is launched with one call from Python into C++: the launcher calls
    # the wrapper's entry function itself.
    assert m["direct_cpp_programs"] == m["cpp_wrapper_programs"], m


def test_training_programs_call_their_kernels_from_cpp_too():
    """Forward and backward programs get the C++ wrapper as well: their attention, saved
    outputs included, becomes ATen's CPU ops. Gradients equal eager neuron's, with and without a
    float mask that needs a gradient (for which SDPA takes its math path on neuron; a fused
    backward that must compute the mask's gradient stays fused: the test above)."""
    for mask_grad in (False, True):
        torch._dynamo.reset()
        torch.neuron.reset_dynamo_metrics()
        x, mask, wq, wo = _attention_inputs()
        leaves = {"compiled": [t.clone().requires_grad_() for t in (mask, wq, wo)],
                  "eager": [t.clone().requires_grad_() for t in (mask, wq, wo)]}
        for leaf in leaves.values():
            leaf[0].requires_grad_(mask_grad)
        run = {"compiled": torch.compile(_attention_block, backend="neuron"),
               "eager": _attention_block}
        for how in run:
            run[how](x, *leaves[how]).pow(2).sum().backward()
        for got, want in zip(leaves["compiled"], leaves["eager"]):
            if want.grad is not None:
                # Gradients through the projections (16 terms) and attention (6 keys x 8 dims),
                # then summed over the 6 positions: bound by 6 * (16 + 48 + 16) terms.
                assert_close(got.grad, want.grad, terms=480)
        m = torch.neuron.get_dynamo_metrics()
        assert m["programs"] == 2, m
        assert m["cpp_wrapper_programs"] == 2, (mask_grad, m)
        assert m["direct_cpp_programs"] == 2, (mask_grad, m)


def test_attention_becomes_atens_cpu_ops_where_they_compute_what_is_used():
    from torch_neuronx.dynamo import attention

    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    fused_backward = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward.default
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default

    def forward_graph(dropout_p, used):
        g = torch.fx.Graph()
        q, k, v = g.placeholder("q"), g.placeholder("k"), g.placeholder("v")
        node = g.call_function(fused, (q, k, v, None, dropout_p, True), {"scale": 0.5})
        g.output(tuple(g.call_function(operator.getitem, (node, i)) for i in used))
        return torch.fx.GraphModule(torch.nn.Module(), g)

    def targets(gm):
        return [n.target for n in gm.graph.nodes
                if n.op == "call_function" and n.target is not operator.getitem]

    # A training forward's saved outputs: output, logsumexp, philox seed and offset.
    gm = forward_graph(0.0, (0, 1, 6, 7))
    assert attention.use_cpu_attention_ops(gm)
    assert flash in targets(gm) and fused not in targets(gm)
    q = torch.randn(1, 2, 5, 8)
    out, lse, seed, offset = gm(q, q, q)
    ref, ref_lse = flash(q, q, q, is_causal=True, scale=0.5)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)
    assert seed.shape == offset.shape == () and seed.dtype == offset.dtype == torch.int64
    # Dropout, or an output the CPU op does not have (the debug mask), keeps the fused op.
    for dropout_p, used in ((0.1, (0,)), (0.0, (0, 8))):
        gm = forward_graph(dropout_p, used)
        assert not attention.use_cpu_attention_ops(gm)
        assert fused in targets(gm)

    def backward_graph(used):
        g = torch.fx.Graph()
        grad, q, k, v, o, lse = (g.placeholder(n) for n in ("grad", "q", "k", "v", "o", "lse"))
        node = g.call_function(fused_backward, (grad, q, k, v, None, [True, True, True, False],
                                                o, lse, None, None, 5, 5, 0.0, True, None, None),
                               {"scale": 0.5})
        g.output(tuple(g.call_function(operator.getitem, (node, i)) for i in used))
        return torch.fx.GraphModule(torch.nn.Module(), g)

    gm = backward_graph((0, 1, 2))
    assert attention.use_cpu_attention_ops(gm)
    assert targets(gm) == [flash_backward]
    grad = torch.randn(1, 2, 5, 8)
    got = gm(grad, q, q, q, ref, ref_lse)
    want = flash_backward(grad, q, q, q, ref, ref_lse, 0.0, True, scale=0.5)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    gm = backward_graph((0, 1, 2, 3))  # the mask's gradient: only the fused op computes it
    assert not attention.use_cpu_attention_ops(gm)
    assert targets(gm) == [fused_backward]


def test_inference_program_drawing_random_numbers_calls_its_kernels_from_cpp():
    """Random draws from the device generator are our C++ ops (csrc/backend/ops/Random.cpp),
    which Inductor's C++ wrapper calls through the dispatcher: such an inference program has the
    C++ wrapper, is launched directly, and draws eager neuron's numbers."""
    def f(x):
        return torch.nn.functional.dropout(x, 0.25) + torch.rand(x.shape, device=x.device)

    x = torch.ones(3, 4, device="neuron")
    torch.neuron.manual_seed(5)
    with torch.no_grad():
        out = torch.compile(f, backend="neuron")(x)
    torch.neuron.manual_seed(5)
    assert torch.equal(out.cpu(), f(x).cpu())
    m = torch.neuron.get_dynamo_metrics()
    assert m["programs"] == m["cpp_wrapper_programs"] == m["direct_cpp_programs"] == 1, m


@torch.library.custom_op("neuron_compile_test::plus_one", mutates_args=())
def _plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@_plus_one.register_fake
def _(x):
    return torch.empty_like(x)


def test_inference_program_with_another_librarys_op_keeps_the_python_wrapper():
    """Another library's op (here a Python custom op) would be called by Inductor's C++ wrapper
    through a Python callback: such a program keeps the Python wrapper."""
    x = torch.arange(6.0).reshape(2, 3).to("neuron")
    with torch.no_grad():
        out = torch.compile(lambda t: torch.ops.neuron_compile_test.plus_one(t) * 2,
                            backend="neuron")(x)
    assert torch.equal(out.cpu(), (torch.arange(6.0).reshape(2, 3) + 1) * 2)
    m = torch.neuron.get_dynamo_metrics()
    assert m["programs"] == 1 and m["cpp_wrapper_programs"] == 0, m


def test_a_graph_the_cpp_wrapper_cannot_build_compiles_with_the_python_wrapper(monkeypatch):
    """Inductor's C++ wrapper fails on some graphs its Python wrapper builds: the program is
    compiled again with the Python wrapper instead of the graph failing."""
    from torch_neuronx.dynamo import backend

    real = backend._inductor_compile
    tried = []

    def failing_cpp_wrapper(gm, example_inputs, inner, store):
        tried.append(inner["cpp_wrapper"])
        if inner["cpp_wrapper"]:
            raise RuntimeError("C++ compile error (made by the test)")
        return real(gm, example_inputs, inner, store)

    monkeypatch.setattr(backend, "_inductor_compile", failing_cpp_wrapper)
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")  # compile, not load
    inputs = _attention_inputs()
    with torch.no_grad():
        out = torch.compile(_attention_block, backend="neuron")(*inputs)
        assert_close(out, _attention_block(*inputs), terms=80)
    assert tried == [True, False]
    m = torch.neuron.get_dynamo_metrics()
    assert m["programs"] == 1 and m["cpp_wrapper_programs"] == 0, m
