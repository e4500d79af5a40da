// Losses and their backward: nll_loss (what cross_entropy reaches after log_softmax), mse, l1,
// smooth-l1, BCE with logits, KL divergence. Elementwise work plus a reduction: Vector engine.
#include <torch/library.h>

#include "backend/core/BoxedHostMath.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kLoss{"loss", nrtsim::Engine::kVector, &flops::per_element};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_host_math_ops(m, kLoss, {
      "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
      "mse_loss", "mse_loss_backward", "smooth_l1_loss", "smooth_l1_loss_backward",
      "huber_loss", "huber_loss_backward", "binary_cross_entropy", "binary_cross_entropy_backward",
      "multi_margin_loss", "multilabel_margin_loss_forward",
  });
}

}  // namespace
}  // namespace torch_neuronx
