// Softmax, log-softmax, layer norm, RMS norm and batch/group norm, forward and backward. Row
// statistics run on the Vector engine, the exponentials on the Scalar engine; the family is
// accounted to the Vector engine.
#include <torch/library.h>

#include "backend/core/BoxedHostMath.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kNormalization{"normalization", nrtsim::Engine::kVector, &flops::per_element};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_host_math_ops(m, kNormalization, {
      "_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
      "native_layer_norm", "native_layer_norm_backward", "native_batch_norm", "native_batch_norm_backward",
      "_native_batch_norm_legit", "native_group_norm",
      "native_group_norm_backward", "_weight_norm_interface", "_weight_norm_interface_backward",
  });
}

}  // namespace
}  // namespace torch_neuronx
