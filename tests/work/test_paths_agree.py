"""Guard: one description of work. The tiny Llama's training step and decode step run eager
(kernel-trace totals), compiled (program records) and through the estimate's tracer at the same
size must give the same FLOPs and bytes per engine, since all three ask the op-work table
(csrc/backend/core/OpWork.h) about the launches eager makes.

The compiled training step is the loss function compiled (`loss_of`: what a training loop
compiles), run with AOTAutograd's default partition (no recompute) and with the shipped one.

What may differ, and only this:
- Compiled bytes: inside a program elementwise ops and copies keep only the bytes they write
  (the fusion rule of csrc/runtime/ProgramFusion.h, which docs/estimate.md documents); the test
  applies that rule to the eager launches and expects the program records to match exactly:
  without recompute, the forward and the backward programs match on every engine, byte by byte.
  (Decomposed ops count as the call they stand for, program_work.marking: RMSNorm's pow/rsqrt
  backward, rotate_half's slice_backward, the embedding backward and nll_loss's backward are
  the launches eager makes for them.)
- The shipped pipeline (Inductor's joint-graph passes, then its min-cut partitioner): the
  forward program's arithmetic is the eager forward's on every compute engine; the backward
  program recomputes forward ops, work the program does, so there every engine but the Tensor
  engine (never recomputed) may grow -- here vector +6,802 elements (log-softmax, RMSNorm's and
  RoPE's multiplies and adds, two scalar constants), scalar +2,560 (silu, cos, sin), GpSimd
  +128 bytes (the position arange), DMA +1,344 bytes (copies and a cast). The joint-graph
  passes also rewrite the forward's copies: `cat` with the KV cache's empty initial tensor is a
  copy eager launches (two GpSimd launches, 8,192 bytes) and the program elides, and the
  cos/sin table's cat(freqs, freqs) becomes an expand and a DMA copy (1,024 bytes moved from
  GpSimd to DMA): work the program does not do or does on another engine, shown in the table
  (forward GpSimd 12,416 against 21,632 bytes written, DMA 1,600 against 576). A node the passes
  make inside a decomposed call counts with that call (program_work._adopt_rewritten:
  nll_loss_backward's scatter rewritten as where(iota == target) had counted twice, +4,162
  elements; tests/work/test_rewritten_calls.py holds that).
The estimate traces on fake tensors, laid out as neuron's kernels lay their outputs out where
torch's meta function says otherwise (torch_neuronx/_op_work.in_kernel_layouts: the fused
attention's gradients (B, L, heads, head_dim)-major, as ATen's CPU flash backward returns them,
not laid out as each input), so it matches eager on every engine, byte by byte. (Traced with
torch's meta layout, the value's gradient -- the value enters attention as the KV cache's cat,
contiguous (B, heads, L, head_dim) -- made its transpose-and-reshape back to (B, L, hidden) a
copy, 4,096 bytes of DMA per layer here, where eager's is a view.)

Not compared: the module compiled whole (torch.compile(model)) and its loss taken outside. Its
graph returns the logits and the KV cache's key and value too, differentiable outputs the loss
does not use, and a compiled function's backward takes a gradient for every differentiable
output: autograd hands it zeros (zero-fills outside the program: 2,048 + 1,024 + 1,024 elements
here) and the program adds them in (three adds, 4,096 elements on the Vector engine); one such
sum, laid out as the zeros and not as the attention kernel's gradient, then needs a relayout
copy (4,096 bytes, DMA). That is work such a program
really does (AOTAutograd's contract, on any backend), not a pricing difference.

The decode step compares the module compiled whole: a functional update the graph copies back
into its input (the KV cache's) counts as the in-place update eager makes, as Inductor runs it.

Every comparison prints its per-engine table (pytest -s shows them)."""

import copy
import functools

import pytest
import torch

import torch_neuronx

transformers = pytest.importorskip("transformers")

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
BATCH, SEQ, CONTEXT = 2, 16, 32


def config():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)


def model():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(config()).to("neuron")


def totals(rows, fused=False):
    """{engine: [ops, bytes read, bytes written]} of kernel-trace or estimate rows. `fused`: as ops
    inside a program (runtime/ProgramFusion.h: a launch of kind kernel whose main engine is not
    the Tensor engine, or a device-to-device copy, keeps only what it writes)."""
    t = {e: [0, 0, 0] for e in ENGINES}
    for r in rows:
        drop_reads = fused and ((r.get("kind", "kernel") == "kernel" and r["engine"] != "tensor")
                                or r.get("kind") == "copy_device_to_device")
        for e in ENGINES:
            read, written = r["engine_bytes"][e]
            t[e][0] += r["ops"][e]
            t[e][1] += 0 if drop_reads else read
            t[e][2] += written
    return t


def estimate_rows(phases, **kwargs):
    from torch_neuronx.estimate._trace import Shape, _trace

    trace = _trace(config(), Shape(dtype="float32", **kwargs), draft=False)["trace"]
    rows = []
    for r in trace.rows():
        if r["phase"] not in phases:
            continue
        # The main engine, as a launch record has it (the engine with the most ops, else bytes).
        ops = r["ops"]
        main = max(ENGINES, key=lambda e: (ops[e], sum(r["engine_bytes"][e])))
        rows.append(dict(r, engine=main, kind="copy_device_to_device" if main == "dma" else "kernel"))
    return rows


def table(title, columns: dict) -> str:
    lines = [title, f"{'engine':8s} " + "".join(f"{name:>34s}" for name in columns)]
    for e in ENGINES:
        cells = "".join(f"{'%d / %d / %d' % tuple(t[e]):>34s}" for t in columns.values())
        lines.append(f"{e:8s} {cells}")
    lines.append("(FLOPs or elements / bytes read / bytes written)")
    return "\n".join(lines)


def eager_phases(m, step):
    """Kernel-trace rows of each phase of `step(m)`: {phase: rows}."""
    out = {}
    for phase, run in step(m):
        torch_neuronx.clear_kernel_trace()
        run()
        out[phase] = torch_neuronx.kernel_trace()
    return out


def loss_of(m):
    """The training step's computation: the loss of a batch (what a training loop compiles)."""
    return lambda ids: m(input_ids=ids, labels=ids).loss


def training(m, loss=None):
    """The phases of a training step of `m`, its loss computed by `loss` (loss_of(m), or that
    compiled)."""
    loss = loss or loss_of(m)
    ids = torch.zeros(BATCH, SEQ, dtype=torch.long, device="neuron")
    m.zero_grad(set_to_none=True)
    box = {}

    def forward():
        box["loss"] = loss(ids)

    def backward():
        box["loss"].backward()

    return [("forward", forward), ("backward", backward)]


def test_training_step_eager_estimate_compiled(monkeypatch):
    eager_model = model()
    eager_phases(eager_model, training)  # warm: the first step creates what later ones reuse
    eager = eager_phases(eager_model, training)

    est = {p: totals(estimate_rows({p}, phase="train", batch=BATCH, seq_len=SEQ))
           for p in ("forward", "backward")}
    eag = {p: totals(eager[p]) for p in eager}

    # The shipped pipeline, and one whose partitioner recomputes nothing. Each compiles afresh:
    # the program cache would serve the second the graph entry of the first (its key does not
    # hold the partitioner, which only this test replaces).
    from torch._functorch.partitioners import default_partition
    from torch_neuronx.dynamo import backend

    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
    compiled = {}
    for name, partition in (("compiled", None), ("compiled, no recompute", default_partition)):
        m = copy.deepcopy(eager_model)
        saved = backend._partition
        if partition is not None:
            backend._partition = lambda joint, inputs, **kw: partition(joint, inputs, **kw)
        try:
            torch._dynamo.reset()
            loss = torch.compile(loss_of(m), backend="neuron", fullgraph=True)
            step = functools.partial(training, loss=loss)
            eager_phases(m, step)
            compiled[name] = eager_phases(m, step)
        finally:
            backend._partition = saved
            torch._dynamo.reset()
    comp = {name: {p: totals(rows) for p, rows in phases.items()} for name, phases in compiled.items()}
    fused = {p: totals(eager[p], fused=True) for p in eager}

    for p in ("forward", "backward"):
        print()
        print(table(f"tiny Llama training step, {p} (batch {BATCH} x {SEQ} tokens, float32)", {
            "eager": eag[p], "estimate": est[p], "eager, fused rule": fused[p],
            "compiled, no recompute": comp["compiled, no recompute"][p],
            "compiled": comp["compiled"][p]}))

    for p in ("forward", "backward"):
        # Eager and the estimate: the same launches, every engine, byte by byte.
        for e in ENGINES:
            assert est[p][e] == eag[p][e], (p, e, est[p][e], eag[p][e])
        # Compiled, either partition: the Tensor engine's work is the eager launches', exactly
        # (matmuls and attention are neither decomposed, fused away nor recomputed).
        for name in comp:
            assert comp[name][p]["tensor"] == fused[p]["tensor"], (name, p)
    # The programs without recompute: the eager launches of each phase under the fusion rule, on
    # every engine, byte by byte (the backward phase's one launch outside its program, the fill
    # of the loss's gradient, counted on both sides).
    for p in ("forward", "backward"):
        for e in ENGINES:
            assert comp["compiled, no recompute"][p][e] == fused[p][e], (
                p, e, comp["compiled, no recompute"][p][e], fused[p][e])
    # The shipped pipeline: the forward program's arithmetic is the eager forward's; recompute
    # only adds to the backward program's work and bytes written (never on the Tensor engine,
    # asserted above).
    shipped = comp["compiled"]
    for e in ("tensor", "vector", "scalar"):
        assert shipped["forward"][e] == fused["forward"][e], (e, shipped["forward"][e])
    for e in ENGINES:
        grown = [shipped["backward"][e][i] - fused["backward"][e][i] for i in (0, 2)]
        assert min(grown) >= 0, (e, shipped["backward"][e], fused["backward"][e])


def decoding(m, cache):
    def step():
        # The token and its position made in the step, as the estimate's decode step makes them.
        ids = torch.zeros(1, 1, dtype=torch.long, device="neuron")
        position = torch.arange(CONTEXT - 1, CONTEXT, device="neuron")
        with torch.no_grad():
            m(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=position)

    return [("decode", step)]


def test_decode_step_eager_estimate_compiled():
    from transformers import StaticCache

    m = model().eval()
    ids = torch.zeros(1, 1, dtype=torch.long, device="neuron")
    runs = {}
    for name, run in (("eager", m), ("compiled", torch.compile(m, backend="neuron", fullgraph=True))):
        torch._dynamo.reset()
        cache = StaticCache(config=config(), max_cache_len=CONTEXT)
        with torch.no_grad():
            run(input_ids=ids, past_key_values=cache, use_cache=True,
                cache_position=torch.tensor([0], device="neuron"))
        eager_phases(run, lambda r: decoding(r, cache))  # warm (compiles)
        runs[name] = eager_phases(run, lambda r: decoding(r, cache))["decode"]
    torch._dynamo.reset()
    est = totals(estimate_rows({"decode"}, phase="decode", batch=1, context=CONTEXT))
    eag, fused, comp = totals(runs["eager"]), totals(runs["eager"], fused=True), totals(runs["compiled"])
    print()
    print(table(f"tiny Llama decode step (batch 1, KV cache of {CONTEXT}, float32)", {
        "eager": eag, "estimate": est, "eager, fused rule": fused, "compiled": comp}))
    for e in ENGINES:
        assert est[e] == eag[e], (e, est[e], eag[e])
    # Compiled: eager's launches under the fusion rule, every engine's arithmetic and the Tensor,
    # Vector, Scalar and DMA bytes exactly (the functionalized KV-cache update, copied back into
    # the cache, counts as the in-place update eager makes: program_work._updates_in_place);
    # GpSimd may write less (16 bytes here: two one-element aranges eager launches that the
    # graph does not contain). A program loaded from the program cache counts what it counted
    # when compiled (program_work prices both on plain meta tensors;
    # tests/compile/test_cached_program_work.py).
    for e in ("tensor", "vector", "scalar", "dma"):
        assert comp[e] == fused[e], (e, comp[e], fused[e])
    assert comp["gpsimd"][0] == fused["gpsimd"][0] and comp["gpsimd"][2] <= fused["gpsimd"][2], (
        comp["gpsimd"], fused["gpsimd"])
