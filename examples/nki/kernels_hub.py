"""The kernels Hub path, offline: a local kernel repository in the `kernels` package layout
(examples/nki/hub/nki-rmsnorm, build variant `torch-neuron`) provides an NKI RMSNorm layer, and
`kernelize(model, device="neuron")` swaps it into a transformers Llama; the logits match the stock
layer's.

    python examples/nki/kernels_hub.py

transformers 5.23 marks LlamaRMSNorm with its own `@use_kernel_forward_from_hub("RMSNorm")`, but
only when the installed `kernels` is >= 0.18.2 and < 0.19.0 (requirements/test.txt pins 0.18.3);
with any other version its decorator is a stub that leaves the class unmarked (docs/nki.md, "The
kernels Hub path", has the lines). Then this script applies the same decorator from `kernels`
itself, which is what transformers' decorator calls. Everything else is the stock `kernels` API.
"""

import importlib.metadata
import os
import pathlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub  # noqa: E402
from kernels import use_kernel_mapping  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

import torch_neuronx  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent / "hub" / "nki-rmsnorm"


def main(dtype=torch.float32):
    by_transformers = getattr(modeling_llama.LlamaRMSNorm, "kernel_layer_name", None) == "RMSNorm"
    if not by_transformers:
        use_kernel_forward_from_hub("RMSNorm")(modeling_llama.LlamaRMSNorm)
    print("LlamaRMSNorm marked for the Hub by " +
          ("transformers' own @use_kernel_forward_from_hub" if by_transformers else
           "this script (kernels.use_kernel_forward_from_hub: transformers' gate rejected the "
           "installed kernels " + importlib.metadata.version("kernels") + ")"))
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval().to(device="neuron", dtype=dtype)
    ids = torch.randint(0, 128, (2, 20)).to("neuron")
    with torch.no_grad():
        stock = model(ids).logits.cpu()

    mapping = {"RMSNorm": {"neuron": LocalLayerRepository(repo_path=REPO, layer_name="RMSNorm")}}
    with use_kernel_mapping(mapping):
        kernelize(model, mode=Mode.INFERENCE, device="neuron")
    torch_neuronx.clear_kernel_trace()
    with torch.no_grad():
        kernelized = model(ids).logits.cpu()
    launches = sum(r["launches"] for r in torch_neuronx.kernel_trace()
                   if r["op"] == "nki::rms_norm_kernel")
    norms = sum(isinstance(m, modeling_llama.LlamaRMSNorm) for m in model.modules())
    diff = (kernelized - stock).abs().max().item()
    print(f"kernelized {norms} LlamaRMSNorm layers -> {launches} NKI rms_norm_kernel launches per "
          f"forward; max |logits - stock logits| = {diff:.3e} "
          f"(max |stock logits| = {stock.abs().max().item():.3e}, {dtype})")
    return stock, kernelized, launches, norms


if __name__ == "__main__":
    main()
