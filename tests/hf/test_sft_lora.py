"""examples/sft_lora.py end to end: TRL SFTTrainer + PEFT LoRA in bfloat16 on `neuron`, the
checkpoint it saves loaded by plain transformers + peft on CPU and on `neuron` (transformers'
default asynchronous weight loading, `device_map="neuron"`), and Trainer/Accelerate finding the
device through their own code paths."""

import copy
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("peft")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sft_lora.py"
SEQ_LEN = 24


def _load_example():
    spec = importlib.util.spec_from_file_location("sft_lora_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HF_DEACTIVATE_ASYNC_LOAD"}
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}, **extra)
    return env


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The example's main(), in this process, at a few steps."""
    assert "HF_DEACTIVATE_ASYNC_LOAD" not in os.environ
    out = tmp_path_factory.mktemp("sft_lora")
    result = _load_example().main(["--output-dir", str(out), "--max-steps", "40", "--no-progress"])
    yield result
    if torch.neuron.is_initialized():
        torch.neuron.set_device(0)


def _batch(tokenizer):
    texts = ["two plus three is five .", "the capital of spain is madrid .", "the cow moos ."]
    return tokenizer(texts, padding="max_length", max_length=SEQ_LEN, return_tensors="pt")


# Unit roundoffs: round-to-nearest into bfloat16 (8 significant bits) / float32 (24) moves a value
# by at most this fraction of its magnitude.
U_BF16 = 2.0**-8
U_FP32 = 2.0**-24


def _exact_logits_and_bf16_bound(model, inputs):
    """Logits of `model` (a bf16 CPU model) evaluated in float32, and per logit the distance from
    them that a correct bfloat16 forward may have, from rounding alone.

    The logit z_i = sum_j h_ij W_ij is a dot product of length K (the hidden size) of the final
    hidden state h with the output embedding W, accumulated in float32 and rounded to bf16. With
    s_i = sum_j |h_j W_ij| (the dot product's size before cancellation), a bf16 forward is off by
      - u |z_i|                  the final rounding of the logit to bf16,
      - gamma_K s_i              float32 accumulation, gamma_K = K u32 / (1 - K u32),
      - n u s_i                  h itself carries rounding: n = 2 L + 2 for L decoder layers,
                                 one rounding of relative size u for each write of the residual
                                 stream (attention and MLP, twice per layer) and two for the
                                 final norm (LlamaRMSNorm rounds the normalized value to bf16,
                                 then its product with the bf16 weight).
    This is a first-order error model, not a rigorous bound (rounding errors inside a layer can
    be amplified, e.g. by a sharp softmax), so every use also checks its premise: the CPU's own
    bf16 logits must satisfy it (on this model the CPU needed n = 2.1 to 3.7 of the allowed 6 on
    an AMD EPYC host, and up to 5.15 on an Intel Xeon host with AVX-512 BF16 / AMX, where a bound
    counting one rounding for the final norm failed the premise on one logit in 10944).
    Two correct bf16 implementations (neuron, CPU) are each within this bound of the exact logits,
    hence within twice it of each other; the test checks each against the exact logits, which is
    the tighter statement. Weights are bf16, so the float32 copy computes the same function
    exactly up to float32 rounding (negligible here: u32 = 2**-24)."""
    exact_model = copy.deepcopy(model).float()
    head = exact_model.get_output_embeddings()
    seen = {}
    hook = head.register_forward_hook(lambda _m, args, _out: seen.__setitem__("h", args[0]))
    try:
        with torch.no_grad():
            exact = exact_model(**inputs).logits
    finally:
        hook.remove()
    spread = seen["h"].abs() @ head.weight.abs().T
    k = head.in_features
    gamma_k = k * U_FP32 / (1 - k * U_FP32)
    roundings = 2 * exact_model.config.num_hidden_layers + 2
    bound = U_BF16 * exact.abs() + (roundings * U_BF16 + gamma_k) * spread
    return exact.float(), bound.float()


def _assert_within_bf16_bound(actual, exact, bound, what):
    excess = (actual - exact).abs() - bound
    over = excess > 0
    if over.any():
        idx = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
        raise AssertionError(
            f"{what}: {int(over.sum())} of {over.numel()} logits are farther from the exact "
            f"(float32) logits than bfloat16 rounding allows; worst at {idx}: got "
            f"{actual[idx].item():.5f}, exact {exact[idx].item():.5f}, allowed distance "
            f"{bound[idx].item():.5f}"
        )


def _assert_logits_close(actual, cpu_model, inputs):
    """`actual` (neuron's bf16 logits) and the bf16 CPU model's logits are both within bf16
    rounding of the exact logits. The CPU half checks the bound's premise on this model: if it
    fails, the error model is wrong, not the device."""
    exact, bound = _exact_logits_and_bf16_bound(cpu_model, inputs)
    with torch.no_grad():
        on_cpu = cpu_model(**inputs).logits.float()
    _assert_within_bf16_bound(on_cpu, exact, bound, "CPU (premise of the bound)")
    _assert_within_bf16_bound(actual, exact, bound, "neuron")
    return exact, bound


def _logits(model, batch, device):
    with torch.no_grad():
        return model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu()


def test_script_shows_progress_and_trains_on_neuron(tmp_path):
    """The script as a user runs it: progress bar, device, falling loss, safetensors files."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--output-dir", str(tmp_path), "--max-steps", "20"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "training on neuron:0 (accelerator: neuron)" in proc.stdout
    assert "20/20" in proc.stderr  # tqdm's progress bar reached the last step
    assert "'loss':" in proc.stdout
    assert (tmp_path / "base" / "model.safetensors").is_file()
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()


def test_trainer_and_accelerate_placed_model_on_neuron(trained):
    trainer = trained["trainer"]
    assert trainer.args.device == torch.device("neuron", 0)
    assert trainer.accelerator.device.type == "neuron"
    devices = {p.device.type for p in trainer.model.parameters()}
    assert devices == {"neuron"}
    dtypes = {p.dtype for p in trainer.model.parameters() if not p.requires_grad}
    assert dtypes == {torch.bfloat16}
    assert trainer.accelerator.mixed_precision == "bf16"


def test_loss_falls(trained):
    losses = trained["losses"]
    assert len(losses) >= 4
    assert losses[-1] < 0.75 * losses[0], losses


def test_loss_curve_matches_cpu(trained, tmp_path):
    """The same script with `use_cpu=True` (TrainingArguments' own switch) logs the same losses."""
    cpu = _load_example().main(
        ["--output-dir", str(tmp_path), "--max-steps", "40", "--no-progress", "--use-cpu"]
    )
    assert cpu["trainer"].args.device.type == "cpu"
    assert {p.device.type for p in cpu["trainer"].model.parameters()} == {"cpu"}
    torch.testing.assert_close(
        torch.tensor(trained["losses"]), torch.tensor(cpu["losses"]), rtol=2e-2, atol=2e-2
    )


def test_checkpoint_reloads_the_trained_model(trained):
    """The checkpoint is the trained model: every parameter and buffer (non-persistent ones too,
    which a reload recomputes rather than reads) has the trained model's dtype and bits. Catches
    what a logit comparison cannot, such as the rotary frequencies that a `.to(bfloat16)` of the
    freshly built model used to round to bf16 while every reload recomputed them in float32."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = trained["output_dir"]
    trained_model = trained["trainer"].model
    reloaded = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(out / "base"), out / "adapter"
    )
    want = {**dict(trained_model.named_parameters()), **dict(trained_model.named_buffers())}
    got = {**dict(reloaded.named_parameters()), **dict(reloaded.named_buffers())}
    assert set(got) == set(want)
    assert any(name.endswith("inv_freq") for name in want)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype, (name, got[name].dtype, tensor.dtype)
        assert torch.equal(got[name], tensor.detach().cpu()), name


def test_checkpoint_loads_on_cpu_with_same_logits(trained):
    """Plain transformers + peft on CPU reproduce the trained model's logits on neuron: both are
    within bf16 rounding of the exact logits (in practice neuron's are bit for bit the CPU's, as
    both run the same ATen kernels on the same bytes)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = trained["output_dir"]
    tokenizer = AutoTokenizer.from_pretrained(out / "base")
    batch = _batch(tokenizer)
    trained_model = trained["trainer"].model.eval()
    on_neuron = _logits(trained_model, batch, "neuron")

    base = AutoModelForCausalLM.from_pretrained(out / "base")
    cpu_model = PeftModel.from_pretrained(base, out / "adapter").eval()
    assert next(cpu_model.parameters()).device.type == "cpu"
    exact, bound = _assert_logits_close(on_neuron, cpu_model, dict(batch))

    # The check can fail: without the trained adapter the logits fall outside the bound.
    plain = _logits(AutoModelForCausalLM.from_pretrained(out / "base"), batch, "cpu")
    with pytest.raises(AssertionError, match="farther from the exact"):
        _assert_within_bf16_bound(plain, exact, bound, "base model without the adapter")


def test_device_map_neuron_with_async_loading(trained):
    """from_pretrained(device_map="neuron") with transformers' threaded loader, base and adapter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = trained["output_dir"]
    tokenizer = AutoTokenizer.from_pretrained(out / "base")
    batch = _batch(tokenizer)

    base = AutoModelForCausalLM.from_pretrained(out / "base", device_map="neuron")
    model = PeftModel.from_pretrained(base, out / "adapter").eval()
    assert {p.device.type for p in model.parameters()} == {"neuron"}
    on_neuron = _logits(model, batch, "neuron")
    cpu_base = AutoModelForCausalLM.from_pretrained(out / "base")
    cpu_model = PeftModel.from_pretrained(cpu_base, out / "adapter").eval()
    _assert_logits_close(on_neuron, cpu_model, dict(batch))

    # transformers' own PEFT integration: the adapter directory alone, straight onto neuron.
    direct = AutoModelForCausalLM.from_pretrained(out / "adapter", device_map="neuron").eval()
    assert {p.device.type for p in direct.parameters()} == {"neuron"}
    direct_cpu = AutoModelForCausalLM.from_pretrained(out / "adapter").eval()
    _assert_logits_close(_logits(direct, batch, "neuron"), direct_cpu, dict(batch))


def test_device_map_auto_with_neuron_max_memory(trained):
    """device_map="auto": accelerate 1.15's get_max_memory() counts only CUDA-like devices it
    knows by name (not torch.accelerator), so without max_memory it plans for the CPU alone. Given
    the neuron budget as integer device ids (which torch maps to the current accelerator, neuron),
    it places the model on neuron, splitting it across cores when one budget is too small."""
    from transformers import AutoModelForCausalLM

    path = trained["output_dir"] / "base"
    ref = AutoModelForCausalLM.from_pretrained(path).state_dict()
    size = sum(t.numel() * t.element_size() for t in ref.values())

    whole = AutoModelForCausalLM.from_pretrained(path, device_map="auto", max_memory={0: "1GiB"})
    assert {t.device for t in whole.state_dict().values()} == {torch.device("neuron", 0)}

    split = AutoModelForCausalLM.from_pretrained(
        path, device_map="auto", max_memory={0: int(size * 0.6), 1: "1GiB"}
    )
    devices = {t.device for t in split.state_dict().values()}
    assert devices == {torch.device("neuron", 0), torch.device("neuron", 1)}, devices
    for name, t in split.state_dict().items():
        assert torch.equal(t.cpu(), ref[name]), name
    ids = torch.arange(3, 19).reshape(2, 8)
    with torch.no_grad():
        got = split(input_ids=ids.to("neuron:0")).logits.float().cpu()
    _assert_logits_close(got, AutoModelForCausalLM.from_pretrained(path).eval(), {"input_ids": ids})


def test_async_loading_runs_in_worker_threads_and_never_hangs(trained):
    """A fresh process (no HF_DEACTIVATE_ASYNC_LOAD) loads onto neuron and neuron:2: the copies to
    the device really happen in transformers' worker threads, land on the requested core and match
    the CPU load. A hang fails through the subprocess timeout."""
    code = textwrap.dedent(
        f"""
        import threading, torch
        import transformers.core_model_loading as cml
        from transformers import AutoModelForCausalLM

        threads = set()
        original = cml._materialize_copy
        def spy(tensor, device=None, dtype=None):
            threads.add(threading.current_thread().name)
            return original(tensor, device, dtype)
        cml._materialize_copy = spy  # observes only; the loader itself is unchanged

        path = {str(trained["output_dir"] / "base")!r}
        ref = AutoModelForCausalLM.from_pretrained(path).state_dict()
        for device_map in ("neuron", "neuron:2", {{"": "neuron:1"}}):
            threads.clear()
            model = AutoModelForCausalLM.from_pretrained(path, device_map=device_map)
            want = torch.device("neuron", 0 if device_map == "neuron" else
                                (2 if device_map == "neuron:2" else 1))
            for name, t in model.state_dict().items():
                assert t.device == want, (name, t.device, want)
                assert torch.equal(t.cpu(), ref[name]), name
            assert threads and "MainThread" not in threads, threads
        print("OK", sorted(threads))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "OK" in proc.stdout


def test_device_detection_through_library_code_paths():
    """transformers, accelerate and TrainingArguments find `neuron` with nothing patched."""
    code = textwrap.dedent(
        """
        import torch
        from transformers.utils.import_utils import is_torch_neuron_available
        from accelerate.utils import is_neuron_available
        from accelerate import Accelerator, PartialState
        from accelerate.utils import DistributedType
        from transformers import TrainingArguments

        assert is_torch_neuron_available() and is_neuron_available()
        state = PartialState()
        assert state.device == torch.device("neuron"), state.device
        assert state.distributed_type == DistributedType.NO
        acc = Accelerator(mixed_precision="bf16")
        acc_device = acc.device
        assert acc_device.type == "neuron", acc_device
        # TrainingArguments builds its own accelerate state (it resets AcceleratorState).
        args = TrainingArguments(output_dir="unused", bf16=True, report_to=[])
        assert args.device == torch.device("neuron", 0), args.device
        assert args.n_gpu == 1
        print("OK", args.device, acc_device)
        """
    )
    env = _clean_env()
    env.pop("ACCELERATE_TORCH_DEVICE", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "OK neuron:0 neuron" in proc.stdout
