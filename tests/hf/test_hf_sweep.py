"""A fixed subset of the Hugging Face architecture sweep (`python testing/hf_sweep.py`):
each architecture, built tiny from its own config class, must match CPU on loss, logits, gradient
norms and greedy tokens, with no CPU-fallback op."""

import pathlib
import sys

import pytest

pytest.importorskip("transformers")

# The sweep is a harness outside the shipped package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "testing"))
import hf_sweep  # noqa: E402

import torch  # noqa: E402

# Decoders of the main families; gpt2 and gemma tie their embeddings and lm_head, which must stay
# tied through Module.to("neuron"); qwen3_moe routes tokens with histc on integer expert ids.
# The rest exercise the shrink's consistency rules: gptj's rotary_dim within the head, mamba2's SSM
# heads * head_dim == expand * hidden, deepseek_v32's latent attention (as many KV heads as heads),
# nemotron_h's hybrid pattern (every layer kind kept, up to 4 layers), mllama built from the
# shrunk text_config of its wrapper config.
SUBSET = ["llama", "qwen3", "mistral", "qwen2", "phi3", "gpt2", "gemma", "qwen3_moe",
          "gptj", "mamba2", "deepseek_v32", "nemotron_h", "mllama"]


@pytest.mark.parametrize("model_type", SUBSET)
def test_architecture_matches_cpu(model_type):
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    rec = hf_sweep.sweep_one(model_type, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type], torch.float32, 120)
    assert rec["status"] == "pass", rec
    assert rec["fallback_ops"] == [], rec["fallback_ops"]
    assert len(rec["tokens"]) == hf_sweep.NEW_TOKENS


def test_non_decoders_are_skipped_with_a_reason():
    rec = hf_sweep.sweep_one("bart", "BartForCausalLM", torch.float32, 60)
    assert rec["status"] == "skipped" and "encoder-decoder" in rec["reason"]


def test_hybrid_shrink_keeps_every_layer_kind():
    from transformers import CONFIG_MAPPING

    cfg = hf_sweep.tiny_config("nemotron_h")
    assert set(cfg.layers_block_type) == set(CONFIG_MAPPING["nemotron_h"]().layers_block_type)
    assert len(cfg.layers_block_type) <= hf_sweep.MAX_LAYERS
    # a repeating block pattern (recurrent, recurrent, attention) still reaches an attention layer
    cfg = hf_sweep.tiny_config("recurrent_gemma")
    assert "attention" in cfg.block_types[: cfg.num_hidden_layers]


def test_wrapper_config_is_swept_through_its_text_config():
    rec = hf_sweep.sweep_one("llama4", "Llama4ForCausalLM", torch.float32, 60)
    assert rec["status"] != "skipped" and "text_config" in rec["config"], rec


def test_assistant_drafters_are_skipped_with_a_reason():
    rec = hf_sweep.sweep_one("gemma4_assistant", "Gemma4AssistantForCausalLM", torch.float32, 60)
    assert rec["status"] == "skipped" and "drafter" in rec["reason"]


@pytest.mark.parametrize("model_type", ["llama"])
def test_compiled_column_matches_eager(model_type):
    # The sweep's compiled column: fullgraph torch.compile(backend="neuron") forward+backward
    # against eager neuron with the sweep's tolerances (CI runs this one architecture; the whole
    # column is `python testing/hf_sweep.py --compiled`).
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    rec = hf_sweep.sweep_one(model_type, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type],
                             torch.float32, 300, compiled=True)
    assert rec["status"] == "pass", rec
    assert rec["compiled"] == "pass", rec.get("compiled_detail")
    assert "programs" in rec["compiled_detail"]


def test_compiled_column_reports_a_failure():
    # A compiled run that raises is a "fail" with the error, not a crash of the sweep.
    neu = {"loss": 1.0, "logits": torch.zeros(1), "grad_norms": {}}
    status, detail = hf_sweep.compare_compiled({"error": "Unsupported: graph break"}, neu,
                                               torch.float32)
    assert status == "fail" and "graph break" in detail
    comp = {"loss": 1.5, "logits": torch.zeros(1), "grad_norms": {}, "programs": 2, "seconds": 1}
    status, detail = hf_sweep.compare_compiled(comp, neu, torch.float32)
    assert status == "fail" and "loss diff" in detail


def test_compiled_column_tells_the_models_graph_breaks_from_ours():
    # A graph break that Dynamo alone hits on the CPU (here a logger call, as transformers'
    # loss_function makes for GPT2LMHeadModel) is the model's code; a model that traces is not.
    import logging

    class Tiny(torch.nn.Module):
        def __init__(self, log):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.log = log

        def forward(self, input_ids, attention_mask=None, labels=None):
            if self.log:
                logging.getLogger("tiny").warning("logged inside forward")
            return self.lin(input_ids.float())

    ids = torch.ones(2, 4, dtype=torch.long)
    assert hf_sweep.graph_breaks_without_neuron(Tiny(log=True), ids)
    assert not hf_sweep.graph_breaks_without_neuron(Tiny(log=False), ids)
    # And the sweep's record says so, naming Dynamo alone on the CPU.
    res = hf_sweep._run_compiled(Tiny(log=True), torch.float32, ids)
    assert "model's code" in res["error"] and "Dynamo alone" in res["error"], res

    # Code Dynamo cannot trace at all under fullgraph (a size read from data, as dbrx's expert
    # loop does) is the model's too.
    class DataDependent(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, labels=None):
            total = input_ids.float().sum()
            for i in range(torch.nonzero(input_ids > 0).shape[0]):  # a loop over a data size
                total = total + i
            return total

    assert hf_sweep.graph_breaks_without_neuron(DataDependent(), ids)
    res = hf_sweep._run_compiled(DataDependent(), torch.float32, ids)
    assert res["error"].startswith("untraceable code in the model's code"), res


def test_eager_report_carries_the_compiled_columns_count(tmp_path):
    """The compiled column runs on its own (`--compiled`); the eager report states its count when
    the compiled report sits next to it, and says nothing of it otherwise."""
    import json

    meta = {"date": "d", "machine": "m", "torch": "t", "transformers": "x", "dtype": "float32",
            "torch_dtype": torch.float32, "wall_s": 1.0, "repeats": 1}
    records = [{"model_type": "llama", "class": "LlamaForCausalLM", "status": "pass", "neuron_s": 1.0,
                "cpu_s": 1.0, "max_diff": {}}]
    hf_sweep.write_reports(records, meta, str(tmp_path))
    assert "compiled" not in (tmp_path / "hf_coverage.md").read_text()

    compiled = [dict(records[0], compiled="pass"), dict(records[0], model_type="gpt2", compiled="fail"),
                dict(records[0], model_type="opt", compiled="pass")]
    hf_sweep.write_reports(compiled, dict(meta, compiled=True, date="c"), str(tmp_path))
    assert json.loads((tmp_path / "hf_coverage_compiled.json").read_text())["meta"]["date"] == "c"
    hf_sweep.write_reports(records, meta, str(tmp_path))
    text = (tmp_path / "hf_coverage.md").read_text()
    assert "run c over 3 architectures): **2** pass of 3 that pass eagerly —" in text
    # Failures that Dynamo alone hits on the CPU are counted apart.
    compiled[1]["compiled_detail"] = "graph break " + hf_sweep.MODEL_CODE_MARK + ": Unsupported"
    hf_sweep.write_reports(compiled, dict(meta, compiled=True, date="c"), str(tmp_path))
    hf_sweep.write_reports(records, meta, str(tmp_path))
    text = (tmp_path / "hf_coverage.md").read_text()
    assert ("**2** pass of 3 that pass eagerly; 1 of the 1 others cannot be traced as one graph by "
            "Dynamo alone") in text
    assert "[hf_coverage_compiled.md](hf_coverage_compiled.md)" in text


def test_resume_keeps_what_is_done_and_writes_after_each_architecture(tmp_path, monkeypatch):
    """`--resume`: architectures already in the report are kept, not swept again; each newly swept
    one is in the report as soon as it is done (an interrupted sweep loses nothing)."""
    import json

    def record(model_type, status="skipped"):
        return {"model_type": model_type, "class": "X", "status": status, "reason": "test record",
                "config": ""}

    # An earlier, interrupted sweep left llama done.
    hf_sweep.write_reports([record("llama")], dict(
        date="earlier", machine="m", torch="t", transformers="tr", dtype="float32",
        torch_dtype=torch.float32, wall_s=5.0, argv=[], repeats=1, compiled=False), str(tmp_path))
    report = tmp_path / "hf_coverage.json"
    swept = []

    def sweep_one(model_type, cls, dtype, time_limit, repeats, compiled=False):
        # The report already holds every architecture swept before this one.
        done = [r["model_type"] for r in json.loads(report.read_text())["architectures"]]
        assert done == ["llama"] + swept, done
        swept.append(model_type)
        return record(model_type)

    monkeypatch.setattr(hf_sweep, "sweep_one", sweep_one)
    hf_sweep.main(["--only", "llama,qwen3,mistral", "--resume", "--output-dir", str(tmp_path)])
    assert swept == ["mistral", "qwen3"] or swept == ["qwen3", "mistral"]
    final = json.loads(report.read_text())
    assert sorted(r["model_type"] for r in final["architectures"]) == ["llama", "mistral", "qwen3"]
    assert final["meta"]["wall_s"] >= 5.0  # the earlier sweep's time is carried over
