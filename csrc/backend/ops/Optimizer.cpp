// Optimizer steps: the foreach (multi-tensor) ops torch.optim uses by default and the fused
// AdamW / Adam / SGD kernels (fused=True). Elementwise over every parameter: Vector engine.
// The foreach ops the default optimizers call most have kernels of their own (ForeachKernels.cpp);
// the rest, and the calls those kernels do not serve, run as host math.
#include <torch/library.h>

#include "backend/core/BoxedHostMath.h"
#include "backend/ops/ForeachKernels.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kOptimizer{"optimizer", nrtsim::Engine::kVector, &flops::per_element,
                               /*composite_explicit_cpu=*/true};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_foreach_kernels(m, kOptimizer);
  register_host_math_ops(m, kOptimizer, {
      "_foreach_add", "_foreach_sub", "_foreach_mul", "_foreach_div", "_foreach_addcmul",
      "_foreach_addcdiv", "_foreach_lerp", "_foreach_sqrt", "_foreach_neg", "_foreach_abs",
      "_foreach_exp", "_foreach_reciprocal", "_foreach_sign", "_foreach_pow", "_foreach_maximum",
      "_foreach_minimum", "_foreach_clamp_min", "_foreach_clamp_max", "_foreach_zero",
      "_foreach_copy", "_foreach_norm", "_foreach_max", "_foreach_rsqrt", "_foreach_log",
      "_foreach_tanh", "_foreach_sigmoid",
      "_fused_adamw", "_fused_adam", "_fused_sgd", "_fused_adagrad",
  });
}

}  // namespace
}  // namespace torch_neuronx
