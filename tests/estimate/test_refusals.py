"""Layouts that cannot run are refused (exit non-zero, the problem and the nearest layout that
works named), never projected as if they could; tensor parallelism shards by the model's own
plan or refuses."""

import pytest
import torch

from torch_neuronx.estimate import Layout, LayoutError, estimate
from torch_neuronx.estimate.__main__ import main
from torch_neuronx.estimate._project import Context, Workload

# A GPT-2-architecture config (no tensor-parallel plan in transformers), two layers.
GPT2 = dict(model_type="gpt2", n_layer=2, n_embd=256, n_head=4, vocab_size=1024, n_positions=512)
# A small mixture-of-experts config of the Qwen3-MoE architecture.
MOE = dict(model_type="qwen3_moe", hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
           num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4, head_dim=32,
           num_experts=8, num_experts_per_tok=2, vocab_size=1024, max_position_embeddings=1024,
           tie_word_embeddings=False)


def test_a_layout_that_does_not_fit_is_refused_with_the_nearest_that_does():
    # Llama-3.1-70B training at TP8 on one trn2.48xlarge: weights, gradients and Adam state alone
    # are 70e9 x 16 / 8 = 140 GB per rank, six times a logical core's 24 GiB.
    with pytest.raises(LayoutError) as info:
        estimate("llama-3.1-70b", layout=Layout(tp=8), seq_len=256, compare=())
    message = str(info.value)
    assert "does not fit on trn2.48xlarge" in message and "GiB available" in message
    assert "nearest layout that fits:" in message or "add instances" in message


def test_overcommit_is_projected_only_when_asked_and_marked():
    e = estimate("llama-3.1-70b", layout=Layout(tp=8), seq_len=256, compare=(), allow_overcommit=True)
    t = e.targets[0]
    assert t.overcommitted and not t.fits
    assert t.hbm_bytes > t.capacity
    assert any(n.startswith("OVER-COMMITTED") for n in t.notes)
    assert "OVER-COMMITTED" in e.summary()


def test_pipeline_stages_must_divide_the_layers():
    with pytest.raises(LayoutError, match=r"pp=3 does not divide the model's 2 layers.*nearest that works: pp=2"):
        estimate("tiny-llama", layout=Layout(pp=3), compare=())
    with pytest.raises(LayoutError, match=r"more stages than layers.*pp=80"):
        estimate("llama-3.1-70b", workload="decode", layout=Layout(pp=200), compare=())


def test_an_architecture_without_a_plan_is_refused_for_tensor_parallelism():
    with pytest.raises(LayoutError, match="no tensor-parallel plan"):
        estimate(GPT2, layout=Layout(tp=32), seq_len=64, compare=())
    # Without tensor parallelism it projects (data parallelism needs no plan).
    e = estimate(GPT2, layout=Layout(dp=4), seq_len=64, compare=())
    assert e.targets[0].projection["step_s"] > 0


def test_tensor_parallelism_shards_the_whole_layer_by_the_plan():
    # Llama's plan splits q, k, v, gate and up by columns and o and down by rows: a rank holds
    # 1/tp of a layer but for its norms (and, with fewer key/value heads than ranks, one
    # replicated head).
    from torch_neuronx.estimate._trace import Shape, trace_rank
    from torch_neuronx.estimate._models import load_config

    config = load_config("llama-3.1-8b")
    t = trace_rank(config, Shape("decode", tp=8, batch=1, context=16))
    layer = 4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336  # attention + MLP weights
    assert t.facts["period_params"] == pytest.approx(layer / 8 + 2 * 4096, rel=1e-9)
    assert t.shard.shrink == pytest.approx(8, rel=1e-3)


def test_degrees_that_do_not_divide_are_refused():
    with pytest.raises(LayoutError, match="ep=3 must divide tp=4"):
        estimate(MOE, layout=Layout(tp=4, ep=3), workload="decode", compare=())
    with pytest.raises(LayoutError, match="does not divide the 6 experts.*nearest: 2"):
        estimate(dict(MOE, num_experts=6), layout=Layout(tp=4, ep=4), workload="decode", compare=())
    with pytest.raises(LayoutError, match="cp=3 does not divide seq_len=128"):
        estimate("tiny-llama", layout=Layout(cp=3), seq_len=128, compare=())
    with pytest.raises(ValueError, match="adp=3 must divide tp=4"):
        Layout(tp=4, adp=3)


def test_float16_moe_projects_without_a_traceback(capsys):
    # The grouped expert matmul has no float16 form; the projection says what it did instead.
    rc = main([str_config(MOE), "--dtype", "float16", "--workload", "decode", "--compare", "",
               "--quiet"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "float16 projected as bfloat16" in out.out


def test_cli_refusal_exits_non_zero_naming_the_problem(capsys):
    rc = main(["llama-3.1-70b", "--layout", "tp=8", "--seq-len", "256", "--compare", "", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: tp8 does not fit on trn2.48xlarge")
    assert "Traceback" not in err


def str_config(fields):
    import json
    import tempfile

    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(fields, f)
    f.close()
    return f.name
