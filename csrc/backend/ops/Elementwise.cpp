// Elementwise unary, binary and ternary ops (broadcasting and type promotion included: the CPU
// kernels' TensorIterator does both). Arithmetic runs on the Vector engine, transcendentals on the
// Scalar (activation) engine, as on a NeuronCore.
#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/div_cpu_dispatch.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/sub_cpu_dispatch.h>
#include <torch/library.h>

#include <ATen/native/BinaryOps.h>

#include "backend/core/BoxedHostMath.h"
#include "backend/core/HbmTensorIterator.h"
#include "backend/core/UnboxedHostMath.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kVectorElementwise{"elementwise", nrtsim::Engine::kVector, &flops::per_element};
constexpr OpFamily kScalarElementwise{"activation", nrtsim::Engine::kScalar, &flops::per_element};

// The four arithmetic ops, unboxed, functional and out= forms: they run on every small tensor of
// every model, and the boxed path's argument stack would dominate their cost. The functional form
// runs the CPU's functional kernel, whose result is allocated in HBM already (host_math).
template <class Compute>
at::Tensor& binary_out(const char* op, const at::Tensor& self, const at::Tensor& other,
                       at::Tensor& out, Compute&& compute) {
  return host_math_out({op, Engine::kVector}, out, compute, self, other);
}

//
// When both operands are neuron tensors of one dtype (the common case), the CPU loop runs through
// an iterator over the neuron buffers themselves (HbmTensorIterator.h), which costs about a third
// less than host views and a host result. Mixed dtypes and CPU scalars take the host-view path:
// TensorIterator promotes operands to the common dtype only when the common device is the CPU.
enum class Promotion { kNone, kToFloat };

template <class Compute, class Stub>
at::Tensor binary(const char* op, const at::Tensor& self, const at::Tensor& other,
                  Compute&& compute, Promotion promotion, Stub&& stub) {
  const bool self_on_neuron = self.device().type() == c10::DeviceType::PrivateUse1;
  const c10::Device device = self_on_neuron ? self.device() : other.device();
  const bool direct = self_on_neuron && other.device() == device &&
                      self.scalar_type() == other.scalar_type() &&
                      (promotion == Promotion::kNone || at::isFloatingType(self.scalar_type()));
  if (!direct) return host_math({op, Engine::kVector}, device, compute, self, other);
  Kernel kernel(op, device, Engine::kVector);
  kernel.reads(self).reads(other);
  HbmTensorIterator iter;
  kernel.run([&] {
    const at::TensorBase fresh;  // (no out tensor: the iterator allocates the result)
    if (promotion == Promotion::kToFloat) {
      iter.build_borrowing_binary_float_op(fresh, self, other);
    } else {
      iter.build_borrowing_binary_op(fresh, self, other);
    }
    stub(iter);
    kernel.writes(iter.result()).ops(flops::elementwise(iter.result()));
  });
  return iter.result();
}

// The in-place forms, unboxed too: without them PyTorch's structured in-place wrapper reaches the
// out= kernel through a second dispatch and its own output checks (0.7 us more per call).
template <class Compute>
at::Tensor& binary_inplace(const char* op, at::Tensor& self, const at::Tensor& other,
                           Compute&& compute) {
  return host_math_out({op, Engine::kVector}, self,
                       [&](at::Tensor& s, const at::Tensor&, const at::Tensor& y) { compute(s, y); },
                       self, other);
}

at::Tensor& add_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return binary_inplace("aten::add_.Tensor", a, b,
                        [&](at::Tensor& s, const at::Tensor& y) { at::cpu::add_(s, y, alpha); });
}
at::Tensor& sub_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return binary_inplace("aten::sub_.Tensor", a, b,
                        [&](at::Tensor& s, const at::Tensor& y) { at::cpu::sub_(s, y, alpha); });
}
at::Tensor& mul_(at::Tensor& a, const at::Tensor& b) {
  return binary_inplace("aten::mul_.Tensor", a, b,
                        [](at::Tensor& s, const at::Tensor& y) { at::cpu::mul_(s, y); });
}
at::Tensor& div_(at::Tensor& a, const at::Tensor& b) {
  return binary_inplace("aten::div_.Tensor", a, b,
                        [](at::Tensor& s, const at::Tensor& y) { at::cpu::div_(s, y); });
}

at::Tensor& add_out(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha, at::Tensor& out) {
  return binary_out("aten::add.out", a, b, out, [&](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
    at::cpu::add_outf(x, y, alpha, o);
  });
}
at::Tensor add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return binary(
      "aten::add.Tensor", a, b,
      [&](const at::Tensor& x, const at::Tensor& y) { return at::cpu::add(x, y, alpha); },
      Promotion::kNone, [&](at::TensorIteratorBase& iter) {
        at::native::alpha_check(iter.dtype(), alpha);
        cpu_stub::add(iter, alpha);
      });
}
at::Tensor& sub_out(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha, at::Tensor& out) {
  return binary_out("aten::sub.out", a, b, out, [&](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
    at::cpu::sub_outf(x, y, alpha, o);
  });
}
at::Tensor sub(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return binary(
      "aten::sub.Tensor", a, b,
      [&](const at::Tensor& x, const at::Tensor& y) { return at::cpu::sub(x, y, alpha); },
      Promotion::kNone, [&](at::TensorIteratorBase& iter) {
        at::native::sub_check(a, b);
        at::native::alpha_check(iter.dtype(), alpha);
        cpu_stub::add(iter, -alpha);
      });
}
at::Tensor& mul_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  return binary_out("aten::mul.out", a, b, out, [&](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
    at::cpu::mul_outf(x, y, o);
  });
}
at::Tensor mul(const at::Tensor& a, const at::Tensor& b) {
  return binary(
      "aten::mul.Tensor", a, b,
      [](const at::Tensor& x, const at::Tensor& y) { return at::cpu::mul(x, y); },
      Promotion::kNone, [](at::TensorIteratorBase& iter) { cpu_stub::mul(iter); });
}
at::Tensor& div_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  return binary_out("aten::div.out", a, b, out, [&](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
    at::cpu::div_outf(x, y, o);
  });
}
at::Tensor div(const at::Tensor& a, const at::Tensor& b) {
  return binary(
      "aten::div.Tensor", a, b,
      [](const at::Tensor& x, const at::Tensor& y) { return at::cpu::div(x, y); },
      Promotion::kToFloat, [](at::TensorIteratorBase& iter) { cpu_stub::div_true(iter); });
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.out", TORCH_FN(add_out));
  m.impl("add.Tensor", TORCH_FN(add));
  m.impl("sub.out", TORCH_FN(sub_out));
  m.impl("sub.Tensor", TORCH_FN(sub));
  m.impl("mul.out", TORCH_FN(mul_out));
  m.impl("mul.Tensor", TORCH_FN(mul));
  m.impl("div.out", TORCH_FN(div_out));
  m.impl("div.Tensor", TORCH_FN(div));
  m.impl("add_.Tensor", TORCH_FN(add_));
  m.impl("sub_.Tensor", TORCH_FN(sub_));
  m.impl("mul_.Tensor", TORCH_FN(mul_));
  m.impl("div_.Tensor", TORCH_FN(div_));
  register_host_math_ops(m, kVectorElementwise, {
      // arithmetic
      "add", "sub", "mul", "div", "remainder", "fmod", "neg", "abs", "sign", "sgn", "reciprocal",
      "pow", "lerp", "addcmul", "addcdiv", "maximum", "minimum", "fmax", "fmin",
      "clamp", "clamp_min", "clamp_max", "floor", "ceil", "round", "trunc", "frac", "floor_divide",
      "copysign", "xlogy", "hypot", "nan_to_num", "heaviside", "polar", "complex",
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
  // Functional forms that are composite (a decomposition) on every backend without a kernel of
  // its own: unlike CPU's fused kernels, the decomposition rounds each intermediate to the
  // tensor's dtype, so bf16 gradients would differ from CPU's (and take five launches, not one).
  register_host_math_overloads(m, kScalarElementwise, {"silu_backward", "mish_backward"});
}

}  // namespace
}  // namespace torch_neuronx
