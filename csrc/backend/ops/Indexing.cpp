// Gathers, scatters and joins: embedding (and its backward), index_select, gather, scatter,
// index_put, index, masked ops, cat. Data movement by address: the GpSimd engine's job on a
// NeuronCore (its DMA descriptors do gather/scatter).
#include <ATen/core/Tensor.h>
#include <ATen/ops/histc.h>
#include <torch/library.h>

#include "backend/core/BoxedHostMath.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kIndexing{"indexing", nrtsim::Engine::kGpSimd, &flops::none};

// histc of integer tensors, as CUDA has it (transformers' MoE routing counts tokens per expert
// with histc on integer expert ids off the CPU); CPU's kernel has floating types only. Integers are
// counted in float64 and the counts returned in the input's dtype, as CUDA returns them.
at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  at::Tensor out;
  Kernel kernel("aten::histc", self.device(), Engine::kGpSimd);
  kernel.reads(self).ops(flops::elementwise(self)).run([&] {
    at::Tensor values = host_view(self);
    const bool integral = c10::isIntegralType(self.scalar_type(), /*includeBool=*/true);
    at::Tensor counts = at::histc(integral ? values.to(at::kDouble) : values, bins, min, max);
    out = kernel.result(integral ? counts.to(self.scalar_type()) : counts);
  });
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histc", TORCH_FN(histc));
  register_host_math_ops(m, kIndexing, {
      "embedding_dense_backward", "embedding_renorm", "index_select", "gather", "scatter",
      "scatter_add", "scatter_reduce", "index_add", "index_copy", "index_fill", "index_reduce",
      "_index_put_impl", "index", "masked_scatter", "masked_select", "take",
      "put", "cat", "nonzero", "nonzero_static", "flip", "roll", "repeat_interleave",
      "_unique2", "unique_consecutive", "_unique", "unique_dim", "bincount", "histc",
      "searchsorted", "bucketize", "_embedding_bag", "_embedding_bag_backward",
      "_embedding_bag_dense_backward", "reflection_pad1d", "reflection_pad2d",
      "replication_pad1d", "replication_pad2d", "_pdist_forward", "arange", "linspace", "logspace",
      "eye", "tril_indices", "triu_indices", "unfold_backward",
  });
}

}  // namespace
}  // namespace torch_neuronx
