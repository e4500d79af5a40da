"""torch.compile(backend="neuron") on a tiny Llama (transformers' LlamaForCausalLM, 1 layer,
hidden 32): the compiled training step against eager neuron (loss, gradients, parameters after
AdamW), varying sequence lengths with and without strict static shapes (recompiles counted), and
the Hugging Face entry points: Trainer with TrainingArguments(torch_compile=True) (transformers
picks backend "neuron" itself), and generate() with a static KV cache, compiled by transformers
with the neuron backend on its own or through an explicit CompileConfig, whose tokens must equal
eager generation's; and generate() on a torch.compile'd model, which runs eagerly and says so.

Tolerances: float32 throughout; the longest accumulations are the LM head's and the MLP's
reductions (hidden 32 / intermediate 64 terms) and the gradient sums over batch x sequence
(2 x 16 = 32 rows), each below 64 terms: a reordered float32 sum of n terms differs by at most
about 2*n*eps*sum|terms|, bounded here with n = 64 over the reference's magnitude, times the few
layers the error passes through (a factor of 4).
"""

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

EPS = torch.finfo(torch.float32).eps
TERMS = 64 * 4


def assert_close(actual, expected, terms=TERMS):
    a = actual.detach().cpu().double()
    e = expected.detach().cpu().double()
    scale = max(1.0, e.abs().max().item())
    bound = 2 * terms * EPS * scale
    worst = (a - e).abs().max().item() if e.numel() else 0.0
    assert worst <= bound, f"max difference {worst} exceeds {bound}"


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to("neuron")


def _ids(batch, length, seed=0):
    return torch.randint(3, 64, (batch, length),
                         generator=torch.Generator().manual_seed(seed)).to("neuron")


def test_tiny_llama_training_step_matches_eager():
    eager = tiny_llama()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="neuron", fullgraph=True)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt_c = torch.optim.AdamW(compiled_model.parameters(), lr=1e-2)
    ids = _ids(2, 16)
    for _ in range(2):
        losses = []
        for run, opt in ((eager, opt_e), (compiled, opt_c)):
            opt.zero_grad()
            loss = run(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(loss)
        assert_close(losses[1], losses[0])
        for (name, pe), pc in zip(eager.named_parameters(), compiled_model.parameters()):
            assert pc.grad is not None and pc.grad.device.type == "neuron", name
            assert_close(pc.grad, pe.grad)
        opt_e.step()
        opt_c.step()
        # AdamW divides by sqrt(v) + eps: for gradients near zero a rounding difference is
        # amplified, but the step is bounded by lr, so parameters stay within lr of each other
        # at worst; they are compared at the gradient bound scaled by lr / eps-sized steps.
        for pe, pc in zip(eager.parameters(), compiled_model.parameters()):
            assert_close(pc, pe, terms=TERMS * 16)
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs"] == 1 and m["graph_breaks"] == 0 and m["fallback_graphs"] == 0, m
    assert m["programs"] == 2 and m["program_launches"] == 4, m


def _forward_lengths(lengths):
    model = tiny_llama().eval()
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        for length in lengths:
            ids = _ids(1, length, seed=length)
            assert_close(compiled(input_ids=ids).logits, model(input_ids=ids).logits)
    return torch.neuron.get_dynamo_metrics()


def test_varying_lengths_compile_once_per_graph():
    # PyTorch's automatic dynamic shapes: the second length recompiles into a symbolic graph
    # that serves every later length. TorchNeuron (static shapes) would recompile per length.
    m = _forward_lengths([8, 12, 16, 20])
    assert m["recompiles"] == 1 and m["programs"] == 2, m
    assert m["torchneuron_recompiles"] == 3 and m["torchneuron_programs"] == 4, m


def test_varying_lengths_strict_static_shapes(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_STATIC_SHAPES", "1")
    m = _forward_lengths([8, 12, 16])
    # One program per length, as on TorchNeuron; the counts agree.
    assert m["recompiles"] == 2 and m["programs"] == 3, m
    assert m["torchneuron_recompiles"] == 2 and m["torchneuron_programs"] == 3, m


def test_trainer_with_torch_compile_trains_on_neuron(tmp_path):
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainingArguments

    class Repeated(Dataset):
        def __init__(self):
            self.ids = _ids(4, 16, seed=3).cpu()

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    def train(compile_):
        model = tiny_llama()
        args = TrainingArguments(
            output_dir=str(tmp_path / str(compile_)), per_device_train_batch_size=2,
            max_steps=2, learning_rate=1e-2, logging_steps=1, save_strategy="no",
            report_to=[], torch_compile=compile_, dataloader_pin_memory=False, seed=0)
        trainer = Trainer(model=model, args=args, train_dataset=Repeated())
        assert trainer.args.device.type == "neuron"
        # torch_compile=True alone: transformers picks the neuron backend on a neuron device.
        assert trainer.args.torch_compile_backend == ("neuron" if compile_ else None)
        trainer.train()
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        return losses, trainer.model

    eager_losses, eager_model = train(False)
    torch.neuron.reset_dynamo_metrics()
    compiled_losses, compiled_model = train(True)
    m = torch.neuron.get_dynamo_metrics()
    assert m["programs"] >= 2 and m["program_launches"] >= 4, m  # it really ran compiled
    assert len(compiled_losses) == len(eager_losses) == 2
    # Trainer logs losses rounded to 4 significant digits.
    for c, e in zip(compiled_losses, eager_losses):
        assert c == pytest.approx(e, rel=2e-4)
    for pc, pe in zip(compiled_model.parameters(), eager_model.parameters()):
        assert pc.device.type == "neuron"
        assert_close(pc, pe, terms=TERMS * 16)


def test_generate_with_static_cache_and_compile_config_matches_eager():
    from transformers import CompileConfig

    model = tiny_llama().eval()
    prompt = _ids(1, 6, seed=5)
    common = dict(max_new_tokens=6, do_sample=False, cache_implementation="static")
    eager_tokens = model.generate(prompt, **common, disable_compile=True)
    torch.neuron.reset_dynamo_metrics()
    compiled_tokens = model.generate(
        prompt, **common, compile_config=CompileConfig(backend="neuron", fullgraph=True, mode="default"))
    m = torch.neuron.get_dynamo_metrics()
    assert m["program_launches"] >= 5, m  # the decode steps ran as programs
    assert torch.equal(compiled_tokens.cpu(), eager_tokens.cpu())


def test_generate_with_static_cache_alone_compiles_with_the_neuron_backend():
    """cache_implementation="static" is all it takes: transformers' default CompileConfig on a
    neuron model names backend "neuron" (mode "default", static shapes)."""
    model = tiny_llama().eval()
    prompt = _ids(1, 6, seed=5)
    common = dict(max_new_tokens=6, do_sample=False, cache_implementation="static")
    eager_tokens = model.generate(prompt, **common, disable_compile=True)
    torch.neuron.reset_dynamo_metrics()
    compiled_tokens = model.generate(prompt, **common)
    m = torch.neuron.get_dynamo_metrics()
    assert m["programs"] >= 1 and m["program_launches"] >= 5, m
    assert torch.equal(compiled_tokens.cpu(), eager_tokens.cpu())


def test_generate_on_a_compiled_model_that_runs_eagerly_says_so():
    """torch.compile(model) compiles calls of the module; generate() calls the original model,
    eagerly: 0 programs, and a warning naming the fix instead of silence."""
    from torch_neuronx.dynamo.default_backend import GENERATE_RAN_EAGERLY

    model = tiny_llama().eval()
    compiled = torch.compile(model, backend="neuron")
    prompt = _ids(1, 6, seed=5)
    with pytest.warns(UserWarning, match=r"LlamaForCausalLM\.generate\(\.\.\.\) ran eagerly") as w:
        tokens = compiled.generate(prompt, max_new_tokens=4, do_sample=False)
    assert torch.neuron.get_dynamo_metrics()["program_launches"] == 0
    message = str(next(x.message for x in w if "ran eagerly" in str(x.message)))
    assert message == GENERATE_RAN_EAGERLY.format(name="LlamaForCausalLM")
    assert 'cache_implementation="static"' in message
    assert torch.equal(tokens.cpu(), model.generate(prompt, max_new_tokens=4,
                                                    do_sample=False).cpu())
    # With the static cache, the same call compiles its decoding step: no warning.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        compiled.generate(prompt, max_new_tokens=4, do_sample=False,
                          cache_implementation="static")
    assert torch.neuron.get_dynamo_metrics()["program_launches"] >= 3
