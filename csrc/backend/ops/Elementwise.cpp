// Elementwise unary, binary and ternary ops (broadcasting and type promotion included: the CPU
// kernels' TensorIterator does both). Arithmetic runs on the Vector engine, transcendentals on the
// Scalar (activation) engine, as on a NeuronCore.
#include <torch/library.h>

#include "backend/core/HostMathKernel.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kVectorElementwise{"elementwise", nrtsim::Engine::kVector, &flops_per_element};
constexpr OpFamily kScalarElementwise{"activation", nrtsim::Engine::kScalar, &flops_per_element};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_host_math_ops(m, kVectorElementwise, {
      // arithmetic
      "add", "sub", "mul", "div", "remainder", "fmod", "neg", "abs", "sign", "sgn", "reciprocal",
      "pow", "lerp", "addcmul", "addcdiv", "maximum", "minimum", "fmax", "fmin",
      "clamp", "clamp_min", "clamp_max", "floor", "ceil", "round", "trunc", "frac", "floor_divide",
      "copysign", "xlogy", "hypot", "nan_to_num", "heaviside",
      // comparison and logic
      "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
      "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
      "bitwise_left_shift", "bitwise_right_shift", "isnan", "isposinf", "isneginf",
      "signbit", "where", "masked_fill", "fill", "zero", "isin",
      // ternary and selection
      "threshold", "threshold_backward", "hardtanh", "hardtanh_backward", "relu", "leaky_relu",
      "leaky_relu_backward", "tril", "triu", "native_dropout_backward",
  });
  register_host_math_ops(m, kScalarElementwise, {
      "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
      "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
      "sigmoid", "logit", "erf", "erfc", "erfinv", "gelu", "gelu_backward", "silu",
      "silu_backward", "mish", "elu", "elu_backward", "softplus",
      "softplus_backward", "hardsigmoid", "hardsigmoid_backward", "hardswish",
      "hardswish_backward", "sigmoid_backward", "tanh_backward", "logit_backward",
      "log_sigmoid_forward", "log_sigmoid_backward", "glu", "glu_backward", "lgamma", "digamma",
  });
}

}  // namespace
}  // namespace torch_neuronx
