// Reductions and scans: sum, mean, max/min (with indices), arg-reductions, var/std, norms,
// cumulative ops, sort and top-k. Reductions run on the Vector engine; sort and top-k on GpSimd.
#include <torch/library.h>

#include "backend/core/HostMathKernel.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kReduction{"reduction", nrtsim::Engine::kVector, &flops_per_element};
constexpr OpFamily kSort{"sort", nrtsim::Engine::kGpSimd, &flops_per_element};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_host_math_ops(m, kReduction, {
      "sum", "mean", "prod", "amax", "amin", "aminmax", "max", "min", "argmax", "argmin",
      "var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm", "all", "any", "cumsum", "cumprod", "_cummax_helper",
      "_cummin_helper", "nansum", "count_nonzero",
  });
  register_host_math_ops(m, kSort, {"sort", "topk", "kthvalue", "median", "nanmedian", "mode"});
}

}  // namespace
}  // namespace torch_neuronx
