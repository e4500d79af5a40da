// Reductions and scans: sum, mean, max/min (with indices), arg-reductions, var/std, norms,
// cumulative ops, sort and top-k. Reductions run on the Vector engine; sort and top-k on GpSimd.
#include <ATen/core/Tensor.h>
#include <ATen/ops/mean_cpu_dispatch.h>
#include <ATen/ops/sum_cpu_dispatch.h>
#include <torch/library.h>

#include "backend/core/BoxedHostMath.h"
#include "backend/core/UnboxedHostMath.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kReduction{"reduction", nrtsim::Engine::kVector, &flops::per_element};
constexpr OpFamily kSort{"sort", nrtsim::Engine::kGpSimd, &flops::per_element};

// A reduction does one operation per input element.
constexpr HostMathOp reduction(const char* op) {
  return HostMathOp{op, Engine::kVector, HostMathOp::OpsPer::kInputElement};
}

// sum and mean, unboxed: loss scalars, norms and statistics reduce small tensors all the time.
at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return host_math_out(
      reduction("aten::sum.IntList_out"), out,
      [&](at::Tensor& o, const at::Tensor& a) { at::cpu::sum_outf(a, dim, keepdim, dtype, o); },
      self);
}
at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return host_math_out(
      reduction("aten::mean.out"), out,
      [&](at::Tensor& o, const at::Tensor& a) { at::cpu::mean_outf(a, dim, keepdim, dtype, o); },
      self);
}

at::Tensor sum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
               std::optional<at::ScalarType> dtype) {
  return host_math(
      reduction("aten::sum.dim_IntList"), self.device(),
      [&](const at::Tensor& a) { return at::cpu::sum(a, dim, keepdim, dtype); }, self);
}
at::Tensor sum_all(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return sum(self, std::nullopt, false, dtype);
}
at::Tensor mean(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                std::optional<at::ScalarType> dtype) {
  return host_math(
      reduction("aten::mean.dim"), self.device(),
      [&](const at::Tensor& a) { return at::cpu::mean(a, dim, keepdim, dtype); }, self);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.IntList_out", TORCH_FN(sum_out));
  m.impl("sum.dim_IntList", TORCH_FN(sum));
  m.impl("sum", TORCH_FN(sum_all));
  m.impl("mean.out", TORCH_FN(mean_out));
  m.impl("mean.dim", TORCH_FN(mean));
  register_host_math_ops(m, kReduction, {
      "sum", "mean", "prod", "amax", "amin", "aminmax", "max", "min", "argmax", "argmin",
      "var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm", "all", "any", "cumsum", "cumprod", "_cummax_helper",
      "_cummin_helper", "nansum", "count_nonzero",
  });
  register_host_math_ops(m, kSort, {"sort", "topk", "kthvalue", "median", "nanmedian", "mode"});
  // mode's out= form is a composite on every backend, and refuses devices other than the CPU,
  // CUDA and XPU: run it as the CPU runs it.
  register_host_math_overloads(m, kSort, {"mode.values"});
}

}  // namespace
}  // namespace torch_neuronx
