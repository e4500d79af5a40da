// Gathers, scatters and joins: embedding (and its backward), index_select, gather, scatter,
// index_put, index, masked ops, cat. Data movement by address: the GpSimd engine's job on a
// NeuronCore (its DMA descriptors do gather/scatter).
#include <torch/library.h>

#include "backend/core/HostMathKernel.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kIndexing{"indexing", nrtsim::Engine::kGpSimd, &flops_none};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_host_math_ops(m, kIndexing, {
      "embedding_dense_backward", "embedding_renorm", "index_select", "gather", "scatter",
      "scatter_add", "scatter_reduce", "index_add", "index_copy", "index_fill", "index_reduce",
      "_index_put_impl", "index", "masked_scatter", "masked_select", "take",
      "put", "cat", "nonzero", "nonzero_static", "flip", "roll", "repeat_interleave",
      "_unique2", "unique_consecutive", "_unique", "unique_dim", "bincount", "histc",
      "searchsorted", "bucketize", "_embedding_bag", "_embedding_bag_backward",
      "_embedding_bag_dense_backward", "reflection_pad1d", "reflection_pad2d",
      "replication_pad1d", "replication_pad2d", "_pdist_forward", "arange", "linspace", "logspace",
      "eye", "tril_indices", "triu_indices",
  });
}

}  // namespace
}  // namespace torch_neuronx
