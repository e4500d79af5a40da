"""Known OpInfo parity failures of the neuron backend: the one place they are listed.

Key: (OpInfo name, variant_test_name, dtype, "forward" | "backward"), spelled as in
torch.testing._internal.common_methods_invocations.op_db ("" is the default variant).
Value: why neuron differs from CPU there, concretely: which samples, by how much, what is at
fault. The suite marks these tests xfail(strict=True) and runs every sample of them even in the
CI subset, so a known failure that starts passing fails the run (XPASS(strict)) until its entry
is removed here. The aim is an empty dict: fix the kernel rather than add an entry.

Measured with torch 2.13.0 (TORCH_NEURONX_OPINFO=full); see docs/opinfo.md.
"""

_SPARSE = (
    "sparse layouts (COO/CSR) are not supported on neuron: no Sparse/SparseCsr PrivateUse1 "
    "kernels, and the CPU fallback cannot carry sparse results back; every sample raises "
    "NotImplementedError ({op}: 'sparse tensors ... are not supported on neuron') where CPU "
    "computes a result"
)

# torch.nn.functional.linear_cross_entropy picks its accumulation dtype by device type
# (torch/nn/modules/linear_cross_entropy_options.py, _resolve_auto_acc_dtype / _AUTO_DEFAULTS):
# with acc_policy="auto" CPU accumulates bf16 inputs in float32 ("accurate"), any other device
# type in bf16 ("compact"). Same math on both devices, different algorithm chosen by torch's
# Python code; with an explicit acc_policy="accurate", acc_dtype=torch.float32 neuron matches
# CPU bit for bit. Nothing in the backend is at fault.
_LINEAR_CE = (
    "torch chooses float32 accumulation for bf16 on CPU and bf16 accumulation on other devices "
    "(acc_policy='auto'); {detail}"
)

KNOWN_FAILURES: dict[tuple[str, str, str, str], str] = {
    ("sparse.sampled_addmm", "", "float32", "forward"): _SPARSE.format(
        op="aten::sparse_sampled_addmm"
    ),
    ("sparse.sampled_addmm", "", "float32", "backward"): _SPARSE.format(
        op="aten::sparse_sampled_addmm"
    ),
    ("sparse.mm", "reduce", "float32", "forward"): _SPARSE.format(
        op="aten::_sparse_mm_reduce_impl"
    ),
    ("sparse.mm", "reduce", "bfloat16", "forward"): _SPARSE.format(
        op="aten::_sparse_mm_reduce_impl"
    ),
    ("sparse.mm", "reduce", "float32", "backward"): _SPARSE.format(
        op="aten::_sparse_mm_reduce_impl"
    ),
    ("sparse.mm", "reduce", "bfloat16", "backward"): _SPARSE.format(
        op="aten::_sparse_mm_reduce_impl"
    ),
    ("to_sparse", "", "float32", "forward"): _SPARSE.format(
        op="aten::_sparse_coo_tensor_with_dims_and_tensors"
    ),
    ("to_sparse", "", "bfloat16", "forward"): _SPARSE.format(
        op="aten::_sparse_coo_tensor_with_dims_and_tensors"
    ),
    ("to_sparse", "", "float32", "backward"): _SPARSE.format(
        op="aten::_sparse_coo_tensor_with_dims_and_tensors"
    ),
    ("to_sparse", "", "bfloat16", "backward"): _SPARSE.format(
        op="aten::_sparse_coo_tensor_with_dims_and_tensors"
    ),
    ("nn.functional.linear_cross_entropy", "chunked", "bfloat16", "forward"): _LINEAR_CE.format(
        detail="2 samples (115, 126) differ, at most 0.0088 absolute (a few bf16 ulps)"
    ),
    ("nn.functional.linear_cross_entropy", "chunked", "bfloat16", "backward"): _LINEAR_CE.format(
        detail="21 samples' gradients differ, at most 0.0059 absolute"
    ),
    ("nn.functional.linear_cross_entropy", "chunked_none", "bfloat16", "forward"): (
        _LINEAR_CE.format(detail="11 samples differ, at most 0.0027 absolute")
    ),
    ("nn.functional.linear_cross_entropy", "chunked_none", "bfloat16", "backward"): (
        _LINEAR_CE.format(detail="19 samples' gradients differ, at most 0.0078 absolute")
    ),
}
