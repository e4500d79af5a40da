"""The kernels Hub path offline: a local kernel repository in the `kernels` layout (variant
torch-neuron) provides an NKI RMSNorm layer that kernelize(model, device="neuron") swaps into a
transformers Llama. Runs in a subprocess: the example decorates LlamaRMSNorm process-wide."""

import os

import pytest

pytest.importorskip("kernels")
pytest.importorskip("transformers")

CODE = r"""
import os, sys, torch
if os.environ.get("SIMULATE_INCOMPATIBLE_KERNELS"):
    # What transformers does with a `kernels` outside its supported range (0.17.2, say): its
    # hub-kernel decorators become stubs. Set before transformers imports its models.
    import transformers.utils.import_utils as import_utils
    import_utils.is_kernels_available = lambda *args, **kwargs: False
sys.path.insert(0, os.environ["NKI_EXAMPLES_DIR"])
import kernels_hub
from transformers.models.llama import modeling_llama
by_transformers = getattr(modeling_llama.LlamaRMSNorm, "kernel_layer_name", None) == "RMSNorm"
assert by_transformers == (not os.environ.get("SIMULATE_INCOMPATIBLE_KERNELS")), by_transformers
stock, kernelized, launches, norms = kernels_hub.main()
assert norms == 5 and launches == norms, (norms, launches)
# The swapped layer against the stock formula in float64: a sum of H squares, rsqrt and two
# products in float32 -> relative error <= (H + 8) u.
from transformers.models.llama import modeling_llama
torch.manual_seed(1)
layer = modeling_llama.LlamaRMSNorm(64, eps=1e-6)
with torch.no_grad():
    layer.weight.copy_(torch.randn(64))
from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping
wrapper = torch.nn.Sequential(layer).to("neuron")
with use_kernel_mapping({"RMSNorm": {"neuron": LocalLayerRepository(repo_path=kernels_hub.REPO, layer_name="RMSNorm")}}):
    kernelize(wrapper, mode=Mode.INFERENCE, device="neuron")
x = torch.randn(3, 50, 64)
with torch.no_grad():
    out = wrapper(x.to("neuron")).cpu().double()
xd = x.double()
ref = layer.weight.detach().cpu().double() * xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
assert torch.all((out - ref).abs() <= (64 + 8) * 2.0**-24 * ref.abs()), (out - ref).abs().max()
# The whole model: only the five norms differ, each within the bound above; a smoke check that the
# swapped model computes the same function (no derived bound across the network).
assert (kernelized - stock).abs().max() <= 1e-5 * stock.abs().max()
print("ok")
"""


@pytest.mark.parametrize("decorator", ["transformers", "example"])
def test_kernelize_llama_with_local_nki_rmsnorm(python_subprocess, decorator):
    # "transformers": the pinned kernels is in transformers' range, so transformers' own
    # @use_kernel_forward_from_hub marks LlamaRMSNorm at import. "example": with a kernels outside
    # it transformers leaves the class unmarked and the example applies kernels' decorator itself.
    examples = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "nki")
    env = {"HF_HUB_OFFLINE": "1", "NKI_EXAMPLES_DIR": examples}
    if decorator == "example":
        env["SIMULATE_INCOMPATIBLE_KERNELS"] = "1"
    result = python_subprocess(CODE, env=env, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok" in result.stdout
    marked_by = {"transformers": "transformers' own @use_kernel_forward_from_hub",
                 "example": "this script (kernels.use_kernel_forward_from_hub"}[decorator]
    assert "LlamaRMSNorm marked for the Hub by " + marked_by in result.stdout


def test_local_repository_digest_matches_its_files():
    # kernels verifies a variant's files against the digest metadata.json records (a warning when
    # there is none, an error when a file differs): the example repository must pass its check.
    from pathlib import Path

    from kernels._rust import Metadata
    from kernels.digest import DigestVerificationResult, verify_digest

    variant = (Path(__file__).resolve().parents[2] / "examples" / "nki" / "hub" / "nki-rmsnorm"
               / "build" / "torch-neuron")
    result = verify_digest(variant, metadata=Metadata.read_from_file(str(variant / "metadata.json")),
                           location=None)
    assert isinstance(result, DigestVerificationResult.Success), (
        f"{result}; after editing the example kernel run `tools/hub_digest.py {variant}`")
