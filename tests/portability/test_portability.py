"""The portability report: what would differ on TorchNeuron 2.33, found at the right line of the
user's code; strict mode raises; clean code reports nothing.

The crafted script marks every line the report must name with ``# expect: <category>``; the
test compares that set with the report's (category, line) set, both ways."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch

import torch_neuronx
from torch_neuronx.portability import PortabilityError, coverage

HERE = os.path.dirname(os.path.abspath(__file__))
CRAFTED = os.path.join(HERE, "crafted_script.py")
CLEAN = os.path.join(HERE, "clean_script.py")


def _expected(path):
    marks = set()
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            match = re.search(r"# expect: (\w+)", line)
            if match:
                marks.add((match.group(1), number))
    return marks


def _found(report, path):
    return {(f.category, f.line) for f in report.warnings
            if os.path.samefile(f.file, path)}


def _this_line():
    return sys._getframe(1).f_lineno


def test_crafted_script_each_category_at_its_line():
    import torch._dynamo

    # PyTorch's defaults, whatever an earlier test left: static by default, automatic dynamic
    # shapes after a size change (the second shape recompiles into a symbolic graph).
    with torch._dynamo.config.patch(automatic_dynamic_shapes=True,
                                    assume_static_by_default=True):
        report = torch_neuronx.portability_report(CRAFTED, strict=False)
    expected = _expected(CRAFTED)
    assert {c for c, _ in expected} >= {"cpu_fallback", "float64", "complex", "int64_range",
                                         "channels_last", "dynamic_shapes", "recompile",
                                         "graph_break", "dynamic_compile"}
    found = _found(report, CRAFTED)
    assert found == expected, (
        f"missing: {sorted(expected - found)}, unexpected: {sorted(found - expected)}\n"
        f"{report.text()}")
    # Every warning is in the script (none in torch, this package or the test harness).
    assert all(os.path.samefile(f.file, CRAFTED) for f in report.warnings)
    by = {(f.category, f.subject) for f in report.warnings}
    assert ("cpu_fallback", "aten::normal_") in by   # randn's part, through its composite
    assert ("cpu_fallback", "aten::cumprod.out") in by
    assert ("float64", "torch.float64") in by
    assert ("complex", "torch.complex64") in by
    # On TorchNeuron every shape is its own program: 3 shapes of one frame = 2 recompiles there,
    # 1 here (automatic dynamic shapes), and the report says so.
    compiled = report.summary["compile"]
    assert compiled["torchneuron_recompiles"] == compiled["recompiles"] + 1
    assert compiled["graph_breaks"] >= 1
    int64 = [f for f in report.findings if f.category == "int64_range"]
    assert "1099511627776" in int64[0].message
    # Each warning says what to change.
    assert all(f.fix for f in report.warnings)


def test_json_and_text_render_the_same_findings():
    def body():
        torch.ones(3, dtype=torch.float64).to("neuron")
        torch.ones(3).to("neuron").cumprod(0)

    report = torch_neuronx.portability_report(body, strict=False)
    data = json.loads(report.to_json())
    assert data["warnings"] == len(report.warnings) == 2
    assert data["by_category"] == {"cpu_fallback": 1, "float64": 1}
    # The fallback moves its 3-float input to the host and its 3-float result back.
    fallback = [f for f in data["findings"] if f["category"] == "cpu_fallback"]
    assert fallback[0]["host_bytes"] == 2 * 3 * 4
    assert "24 B through the host" in report.text()
    for finding in data["findings"]:
        assert os.path.samefile(finding["file"], __file__)
        assert f"{os.path.basename(__file__)}:{finding['line']}" in report.text()
        assert finding["fix"] in report.text()


def test_clean_code_reports_nothing():
    report = torch_neuronx.portability_report(CLEAN, strict=True)   # would raise otherwise
    assert report.warnings == []
    # It did look: the training steps' ops were checked, the compiled function compiled, and
    # the int64 labels are noted (info, not a warning).
    assert report.summary["eager_op_calls"] > 50
    assert report.summary["compile"]["programs"] >= 1
    assert [f.category for f in report.findings] == ["int64"]
    assert "nothing would differ" in report.text()


def test_strict_argument_raises_with_the_users_line():
    def body():
        torch.ones(2, dtype=torch.float64).to("neuron")

    line = body.__code__.co_firstlineno + 1
    with pytest.raises(PortabilityError) as error:
        torch_neuronx.portability_report(body, strict=True)
    assert f"{os.path.basename(__file__)}:{line}" in str(error.value)
    assert error.value.report.warnings[0].category == "float64"


def test_strict_env_var_raises_at_the_end_of_the_block(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_PORTABILITY_STRICT", "1")
    with pytest.raises(PortabilityError, match="channels_last"):
        with torch_neuronx.portability_report() as check:
            try:
                torch.zeros(1, 2, 3, 3, device="neuron").contiguous(
                    memory_format=torch.channels_last)
            except RuntimeError:
                pass
            line = _this_line() - 4
    assert check.report.warnings[0].line == line
    # Without strict mode the same block only reports.
    monkeypatch.delenv("TORCH_NEURONX_PORTABILITY_STRICT")
    with torch_neuronx.portability_report() as check:
        torch.ones(2, dtype=torch.float64).to("neuron")
    assert [f.category for f in check.warnings] == ["float64"]


def test_channels_last_tensors_are_noted(monkeypatch):
    # A channels-last CPU tensor copied over, and an op preserving that format, make
    # channels-last neuron tensors without a memory_format argument: TorchNeuron makes them
    # contiguous (or refuses them), so each is noted where it is made. Views, in-place ops,
    # contiguous results and the CPU side are not; strict mode does not fail on a note.
    monkeypatch.delenv("TORCH_NEURONX_PORTABILITY_STRICT", raising=False)
    with torch_neuronx.portability_report(strict=True) as check:
        cpu = torch.randn(2, 3, 4, 4).contiguous(memory_format=torch.channels_last)
        x = cpu.to("neuron")
        copied = _this_line() - 1
        y = x * 2
        preserved = _this_line() - 1
        x.add_(1)
        x.permute(0, 2, 3, 1)
        torch.ones(2, 3, 4, 4, device="neuron") + 1
        torch.ones(2, 1, 4, 4).contiguous(memory_format=torch.channels_last).to("neuron")
        vol = torch.randn(1, 2, 3, 3, 3).contiguous(memory_format=torch.channels_last_3d)
        vol.to("neuron")
        copied_3d = _this_line() - 1
    assert y.is_contiguous(memory_format=torch.channels_last)
    notes = [f for f in check.report.findings if f.category == "channels_last_tensor"]
    assert sorted(f.line for f in notes) == [copied, preserved, copied_3d]
    assert all(f.severity == "info" and os.path.samefile(f.file, __file__) for f in notes)
    assert check.report.warnings == []
    assert "contiguous" in notes[0].message and notes[0].fix
    # An explicit request is the warning alone, not a note as well.
    with torch_neuronx.portability_report() as check:
        torch.zeros(1, 2, 3, 3, device="neuron").contiguous(memory_format=torch.channels_last)
    assert [f.category for f in check.report.findings] == ["channels_last"]


def test_ignore_accepts_named_findings(monkeypatch):
    def body():
        x = torch.ones(4).to("neuron")
        x.cumprod(0)
        x.double()

    # Accepted findings are listed but do not count, so strict mode passes...
    report = torch_neuronx.portability_report(
        body, strict=True, ignore=["cpu_fallback:aten::cumprod.out", "float64"])
    assert report.warnings == []
    assert sorted(f.severity for f in report.findings) == ["ignored", "ignored"]
    assert "[ignored]" in report.text()
    # ...an ignore for another op does not cover this one...
    with pytest.raises(PortabilityError, match="aten::cumprod.out"):
        torch_neuronx.portability_report(body, strict=True,
                                         ignore="cpu_fallback:aten::sort,float64")
    # ...the environment variable works the same, and a wrong category is named.
    monkeypatch.setenv("TORCH_NEURONX_PORTABILITY_IGNORE", "cpu_fallback,float64")
    assert torch_neuronx.portability_report(body, strict=True).warnings == []
    with pytest.raises(ValueError, match="'fallback' is not a category"):
        torch_neuronx.portability_report(body, ignore=["fallback"])


def test_errors_in_the_block_propagate_and_the_check_is_undone():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    from torch_neuronx.dynamo import metrics

    recorder = metrics.record_recompile
    with pytest.raises(ZeroDivisionError):
        with torch_neuronx.portability_report(strict=True) as check:
            torch.ones(2, dtype=torch.float64).to("neuron")
            1 / 0
    # The user's error wins over strict mode; the report still exists; nothing stays installed.
    assert [f.category for f in check.warnings] == ["float64"]
    assert _get_current_dispatch_mode() is None
    assert metrics.record_recompile is recorder
    # One check at a time, with a clear message.
    with torch_neuronx.portability_report():
        with pytest.raises(RuntimeError, match="already checking"):
            with torch_neuronx.portability_report():
                pass


def test_fallback_in_backward_is_placed_at_backward_call():
    grads = []

    def body():
        x = torch.linspace(0.5, 1.5, 6).to("neuron").requires_grad_()
        y = x.cumprod(0).sum()   # forward: cumprod.out is outside coverage
        y.backward()             # backward of cumprod: CPU-fallback ops again
        grads.append(x.grad.cpu())

    first = body.__code__.co_firstlineno
    report = torch_neuronx.portability_report(body, strict=False)
    forward = [f for f in report.warnings if f.line == first + 2]
    assert [f.category for f in forward] == ["cpu_fallback"]
    backward = [f for f in report.warnings if f.details.get("backward_of")]
    assert backward and all(f.line == first + 3 for f in backward)
    # The check does not change results: the same gradient as on the CPU (same float32 ops in
    # the same order, so bit-identical).
    x = torch.linspace(0.5, 1.5, 6).requires_grad_()
    x.cumprod(0).sum().backward()
    torch.testing.assert_close(grads[0], x.grad, rtol=0, atol=0)


def test_results_unchanged_under_the_check():
    # randn runs as PyTorch's composite (empty + normal_) under the check, drawing the same
    # numbers from the same seeded neuron generator; cumprod runs the same float32 products.
    x_cpu = torch.linspace(-2, 2, 24).reshape(4, 6)
    torch.manual_seed(7)
    plain = torch.randn(3, device="neuron").cpu()
    torch.manual_seed(7)
    with torch_neuronx.portability_report():
        checked = torch.randn(3, device="neuron").cpu()
        product = torch.cumprod(x_cpu.to("neuron"), 1).cpu()
    torch.testing.assert_close(checked, plain, rtol=0, atol=0)
    torch.testing.assert_close(product, torch.cumprod(x_cpu, 1), rtol=0, atol=0)


def test_transformers_async_loading(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)   # fixed weights: the greedy tokens below are compared with the CPU's
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)

    monkeypatch.delenv("HF_DEACTIVATE_ASYNC_LOAD", raising=False)
    with torch_neuronx.portability_report() as check:
        model = transformers.LlamaForCausalLM.from_pretrained(tmp_path, device_map="neuron")
        line = _this_line() - 1
    found = [f for f in check.warnings if f.category == "async_weight_loading"]
    assert [(f.line, os.path.basename(f.file)) for f in found] == [
        (line, os.path.basename(__file__))]
    assert next(model.parameters()).device.type == "neuron"

    # Greedy generation: the token choice and stop check run on the CPU on TorchNeuron, found
    # at the user's generate() line through transformers' frames, and the growing KV cache
    # makes attention change shape every step.
    ids = torch.tensor([[1, 5, 9]]).to("neuron")
    with torch_neuronx.portability_report() as check:
        out = model.generate(ids, max_new_tokens=4, do_sample=False)
        line = _this_line() - 1
    here = {(f.category, f.subject): f for f in check.warnings}
    argmax = here[("cpu_fallback", "aten::argmax.out")]
    assert argmax.line == line and "transformers/generation" in argmax.via
    sdpa = here[("dynamic_shapes", "aten::_scaled_dot_product_fused_attention_overrideable")]
    assert sdpa.line == line and sdpa.count >= 3
    with torch.no_grad():
        expected = transformers.LlamaForCausalLM.from_pretrained(tmp_path).generate(
            ids.cpu(), max_new_tokens=4, do_sample=False)
    assert out.cpu().tolist() == expected.tolist()

    # Loaded on the CPU and moved: no device work in loader threads, nothing to report; and
    # with the loader made sequential, nothing either.
    with torch_neuronx.portability_report() as check:
        transformers.LlamaForCausalLM.from_pretrained(tmp_path).to("neuron")
    assert not [f for f in check.warnings if f.category == "async_weight_loading"]
    monkeypatch.setenv("HF_DEACTIVATE_ASYNC_LOAD", "1")
    with torch_neuronx.portability_report() as check:
        transformers.LlamaForCausalLM.from_pretrained(tmp_path, device_map="neuron")
    assert not [f for f in check.warnings if f.category == "async_weight_loading"]
    # The hook is gone after the check.
    assert "from_pretrained" not in vars(transformers.LlamaForCausalLM)
    assert transformers.PreTrainedModel.from_pretrained.__func__.__module__ == \
        "transformers.modeling_utils"


def test_coverage_classification():
    assert coverage.classify("aten::add.Tensor") == coverage.NATIVE
    # An entry without an overload covers the op's overloads (TorchNeuron lists aten::div).
    assert coverage.classify("aten::div.Tensor") == coverage.NATIVE
    assert coverage.classify("aten::normal_") == coverage.CPU_FALLBACK
    # Registered on purpose as CPU fallbacks (cpu_fallback_registrations.py).
    assert coverage.classify("aten::linalg_qr") == coverage.CPU_FALLBACK
    # Not listed, but PyTorch's composite kernel runs there: its parts are checked instead.
    assert coverage.classify("aten::zeros_like") == coverage.COMPOSITE
    data = coverage.load()
    assert data["source"]["commit"] and data["source"]["repository"]


def test_cli_strict_exit_status_and_json(tmp_path):
    script = tmp_path / "uses_float64.py"
    script.write_text("import torch\n"
                      "x = torch.ones(3).to('neuron')\n"
                      "y = x.double()\n"
                      "print('done')\n")
    out = tmp_path / "report.json"
    env = dict(os.environ)
    env.pop("TORCH_NEURONX_PORTABILITY_STRICT", None)
    run = subprocess.run([sys.executable, "-m", "torch_neuronx.portability", "--strict",
                          "--json", str(out), str(script)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1, run.stderr
    assert run.stdout.strip() == "done"     # the script keeps stdout; the report is on stderr
    assert f"{script}:3" in run.stderr
    data = json.loads(out.read_text())
    assert [(f["category"], f["line"]) for f in data["findings"]] == [("float64", 3)]
    assert data["strict"] is True
