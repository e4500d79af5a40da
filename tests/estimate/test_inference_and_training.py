"""The terms of inference and training as deployed, each checked against the arithmetic the data
files imply: the KV-cache write charged for the tokens written, prefill and decode, speculation,
quantized weights, the host loop, ZeRO-1 and recompute in the memory table, the layer split, GPU
layouts on whole instances, the search."""

import configparser
import os

import pytest
import torch

import torch_neuronx
from torch_neuronx.estimate import Layout, Speculation, estimate, search
from torch_neuronx.estimate._models import load_config
from torch_neuronx.estimate._trace import Shape, _trace, trace_rank

DATA = os.path.join(os.path.dirname(torch_neuronx.__file__), "data")
TINY = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
            max_position_embeddings=2048, tie_word_embeddings=False)


def _ini(name):
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(os.path.join(DATA, name))
    return parser


def _totals(rows, phase=None):
    out = {}
    for r in rows:
        if phase and r["phase"] != phase:
            continue
        for engine, n in r["ops"].items():
            out[engine] = out.get(engine, 0) + r["count"] * n
        out["bytes"] = out.get("bytes", 0) + r["count"] * r["bytes"]
    return out


@pytest.mark.parametrize("phase", ["train", "decode"])
def test_one_period_of_layers_stands_for_all_of_them(phase):
    # The model traced whole (4 layers) and split from its 1- and 2-layer traces (outside ops
    # once, a layer's four times) hold the same work per engine, byte for byte.
    config = load_config(TINY)
    shape = Shape(phase, tp=2, batch=1, seq_len=32, context=64)
    whole = _trace(config, shape, draft=False)["trace"].rows()
    split = trace_rank(config, shape)
    combined = split.stage_trace(4).rows()
    assert _totals(combined) == _totals(whole)
    assert split.layers_per_period == 1 and split.periods == 4


def test_decode_charges_the_kv_cache_write_for_the_tokens_written():
    # One decode step writes one key and one value row per layer and kv head: not the cache.
    config = load_config(TINY)
    t = trace_rank(config, Shape("decode", tp=1, batch=2, context=512))
    # (index_copy_ runs as its .out overload with out=self, as eager runs it.)
    rows = [r for r in t.period.rows() if r["op"] == "aten::index_copy.out"]
    assert rows
    written = sum(r["count"] * r["bytes"] for r in rows)
    kv_heads, head_dim = 2, 256 // 4
    row = 2 * 1 * kv_heads * head_dim * 2  # batch 2, one token, bf16
    # keys and values: each write reads the new rows (and their int64 indices) and writes them.
    assert written == 2 * (2 * row + 8)
    assert t.facts["period_kv_cache_bytes"] == 2 * 2 * kv_heads * 512 * head_dim * 2


def test_inference_reports_prefill_and_decode_per_request():
    e = estimate(TINY, workload="inference", instance="trn2.48xlarge", layout=Layout(tp=2),
                 prompt=256, output=64, batch=4, compare=())
    t = e.targets[0]
    r = t.request
    assert r["ttft_s"] == pytest.approx(t.prefill["step_s"])
    assert r["tpot_s"] == pytest.approx(t.projection["step_s"])
    # Four requests prefilled one at a time, then 63 decode steps of the batch.
    cycle = 4 * r["ttft_s"] + 63 * t.projection["step_s"]
    assert r["output_tokens_per_s"] == pytest.approx(4 * 64 / cycle)
    assert "time to first token" in e.summary()


def test_speculation_divides_the_step_by_the_expected_accepted_tokens():
    spec = Speculation(dict(TINY, num_hidden_layers=1), tokens=3, acceptance=0.6)
    e = estimate(TINY, workload="inference", layout=Layout(tp=2), prompt=128, output=32,
                 speculation=spec, compare=())
    t = e.targets[0]
    expected = (1 - 0.6 ** 4) / (1 - 0.6)
    assert t.projection["tokens_per_sequence_step"] == pytest.approx(expected)
    assert t.request["tpot_s"] == pytest.approx(t.projection["step_s"] / expected)
    phases = {ph["phase"] for ph in t.projection["phases"]}
    assert {"decode", "draft"} <= phases
    draft = [o for o in t.projection["ops"] if o["phase"] == "draft" and o["op"] == "aten::mm"]
    assert draft and all(o["count"] % 3 == 0 for o in draft)  # three draft steps per step


def test_int8_weights_halve_the_weight_stream():
    # A memory-bound decode step: the matmuls' weight reads (and the weights' HBM) halve.
    base = estimate("llama-3.1-8b", workload="decode", layout=Layout(tp=8), context=128, compare=())
    q = estimate("llama-3.1-8b", workload="decode", layout=Layout(tp=8), context=128,
                 weights="int8", compare=())
    mem = {n: b for n, b in base.targets[0].projection["memory"]}
    qmem = {n: b for n, b in q.targets[0].projection["memory"]}
    assert qmem["weights"] == pytest.approx(mem["weights"] / 2)
    mm = lambda e: sum(o["engine_s"]["dma"] for o in e.targets[0].projection["ops"] if o["op"] == "aten::mm")
    assert 0.5 < mm(q) / mm(base) < 0.55  # the activations' bytes do not shrink


def test_synchronous_host_loop_adds_the_data_files_host_step():
    host_us = float(_ini("estimate.ini")["efficiency.trainium"]["host_step_us"])
    a = estimate(TINY, workload="decode", layout=Layout(tp=2), compare=())
    b = estimate(TINY, workload="decode", layout=Layout(tp=2), async_host=False, compare=())
    assert b.targets[0].projection["step_s"] - a.targets[0].projection["step_s"] == pytest.approx(
        host_us * 1e-6)


def test_zero1_and_recompute_change_what_fits():
    # Llama-3.1-8B at TP32 on 32 trn1 nodes, sequence 8192: plain data parallelism keeps Adam's
    # state whole; ZeRO-1 shards it over dp = 32; recompute shrinks the activations.
    kw = dict(instance="trn1.32xlarge", seq_len=8192, compare=(), allow_overcommit=True)
    plain = estimate("llama-3.1-8b", layout=Layout(tp=32, dp=32, microbatches=32), **kw).targets[0]
    zero1 = estimate("llama-3.1-8b", layout=Layout(tp=32, dp=32, zero1=True, microbatches=32), **kw).targets[0]
    full = estimate("llama-3.1-8b", layout=Layout(tp=32, dp=32, zero1=True, recompute="full",
                                                  microbatches=32), **kw).targets[0]
    m = lambda t: dict(t.projection["memory"])
    assert m(zero1)["optimizer state"] == pytest.approx(m(plain)["optimizer state"] / 32)
    # (layer inputs, 1/tp of them under sequence parallelism, one layer, and the head's logits)
    assert m(full)["activations"] < m(zero1)["activations"] / 3
    # Full recompute reruns the forward: slower, but useful FLOPs (MFU's numerator) are the same.
    assert full.projection["step_s"] > zero1.projection["step_s"]
    assert full.projection["useful_flops_per_step"] == pytest.approx(zero1.projection["useful_flops_per_step"])
    assert full.fits


def test_gpu_rows_use_whole_instances_and_say_how_the_layout_was_chosen():
    e = estimate("llama-3.1-8b", workload="decode", layout=Layout(tp=8), context=256,
                 compare=("p5.48xlarge",))
    gpu = e.targets[1]
    assert gpu.projection["ranks"] % 8 == 0  # no idle GPU billed
    assert gpu.chosen.startswith("fastest of")
    cost = estimate("llama-3.1-8b", workload="decode", layout=Layout(tp=8), context=256,
                    compare=("p5.48xlarge",), gpu_objective="cost").targets[1]
    assert cost.chosen.startswith("cheapest of")
    assert cost.projection["usd_per_million_tokens"] <= gpu.projection["usd_per_million_tokens"] + 1e-12


def test_search_returns_the_fastest_and_the_cheapest_that_fit():
    found = search(TINY, workload="inference", instances_to_try=("trn1.32xlarge", "p5.48xlarge"),
                   prompt=128, output=16, batches=(1, 4))
    for name, f in found.items():
        assert f.fitting, (name, f.refused)
        fastest, cheapest = f.fastest(), f.cheapest()
        assert all(r.request["tpot_s"] >= fastest.request["tpot_s"] for r, _ in f.fitting)
        assert all(r.request["usd_per_million_output_tokens"] >= cheapest.request["usd_per_million_output_tokens"]
                   for r, _ in f.fitting)
        # Every layout fills the instance (no idle accelerator).
        assert all(r.layout.ranks == f.fitting[0][0].projection["ranks_per_instance"] for r, _ in f.fitting)


def test_bucketed_deployment_pads_the_prompt_and_the_kv_positions():
    from torch_neuronx.estimate._project import auto_buckets

    # NxD Inference's automatic buckets for --max-context-length 12288: powers of two, then 12288.
    assert auto_buckets(12288) == [128, 256, 512, 1024, 2048, 4096, 8192, 12288]
    assert auto_buckets(4096) == [128, 256, 512, 1024, 2048, 4096]
    # A 300-token prompt runs in the 512 bucket, and decode (over 332 positions on average)
    # attends over the 512 bucket: the same projection as the padded lengths without buckets.
    kw = dict(workload="inference", layout=Layout(tp=2), output=64, compare=())
    b = estimate(TINY, prompt=300, buckets=(1024, 2048), **kw).targets[0]
    padded = estimate(TINY, prompt=512, context=512, **kw).targets[0]
    assert b.prefill["step_s"] == pytest.approx(padded.prefill["step_s"])
    assert b.projection["step_s"] == pytest.approx(padded.projection["step_s"])
    exact = estimate(TINY, prompt=300, **kw).targets[0]
    assert exact.prefill["step_s"] < b.prefill["step_s"]
    with pytest.raises(ValueError, match="max context length"):
        estimate(TINY, prompt=4000, buckets=(2048, 4096), **kw)


def test_bucketed_decode_is_charged_the_mean_of_its_steps_buckets():
    from torch_neuronx.estimate._project import Workload

    # 100 in / 301 out: decode steps 1..300 attend over 101..400 positions: 28 of them in the
    # 128 bucket, 128 in the 256 bucket, 144 in the 512 bucket (not all 300 in the bucket of the
    # midpoint, 512).
    w = Workload(kind="inference", prompt=100, output=301, buckets=(128, 512))
    assert w.decode_positions == round((28 * 128 + 128 * 256 + 144 * 512) / 300)
    kw = dict(workload="inference", layout=Layout(tp=2), compare=())
    b = estimate(TINY, prompt=100, output=301, buckets=(128, 512), **kw).targets[0]
    at_mean = estimate(TINY, prompt=128, output=64, context=w.decode_positions, **kw).targets[0]
    assert b.projection["step_s"] == pytest.approx(at_mean.projection["step_s"])
    # The request's last position must fit the compiled sequence length.
    with pytest.raises(ValueError, match="sequence length"):
        Workload(kind="inference", prompt=100, output=500, buckets=(128, 512))
