"""The fallback audit: the benchmark's tiny Llama (hidden 256, 4 layers, 4 heads; here with 2 of
them key/value heads, so grouped-query attention is covered too) runs forward, backward, an AdamW
step and greedy generation on neuron without a single CPU-fallback op, and matches the CPU run.
Batch and sequence are smaller than the benchmark's to keep the test quick."""

import pytest
import torch

import torch_neuronx

transformers = pytest.importorskip("transformers")


def _tiny_llama():
    config = transformers.LlamaConfig(
        vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def _step_and_generate(device):
    model = _tiny_llama().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 1024, (2, 32), generator=torch.Generator().manual_seed(1)).to(device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    optimizer.step()
    optimizer.zero_grad()
    after = model(input_ids=ids).logits
    generated = model.generate(ids[:, :8], attention_mask=torch.ones_like(ids[:, :8]),
                               max_new_tokens=8, do_sample=False, pad_token_id=0)
    return out.loss.detach().cpu(), grad_norm.cpu(), after.detach().cpu(), generated.cpu()


def test_tiny_llama_runs_without_fallback_and_matches_cpu():
    torch_neuronx.clear_op_tracking()
    neuron = _step_and_generate("neuron")
    fallbacks = torch_neuronx.get_fallback_ops()
    cpu = _step_and_generate("cpu")
    assert fallbacks == [], f"ops that fell back to the CPU: {fallbacks}"
    loss, grad_norm, logits, generated = neuron
    torch.testing.assert_close(loss, cpu[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grad_norm, cpu[1], rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(logits, cpu[2], rtol=1e-3, atol=1e-3)
    assert torch.equal(generated, cpu[3])
    executed = torch_neuronx.get_executed_ops()
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in executed
    assert {"aten::mm", "aten::addmm", "aten::mm.out", "aten::addmm.out"} & set(executed)


def test_every_listed_native_op_is_registered():
    # A name in an op family list that matches nothing in this torch version is a stale list.
    assert torch_neuronx._C._unregistered_native_ops() == []
