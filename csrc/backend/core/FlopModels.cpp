#include "backend/core/FlopModels.h"

#include <ATen/native/ConvUtils.h>

#include <algorithm>
#include <string>

namespace torch_neuronx::flops {

namespace {
int64_t numel_of(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().defined() ? v.toTensor().numel() : 0;
  int64_t total = 0;
  if (v.isTensorList()) {
    for (const auto& t : v.toTensorVector()) total += t.numel();
  }
  return total;
}
}  // namespace

uint64_t elementwise(const at::Tensor& out) {
  return out.defined() ? static_cast<uint64_t>(out.numel()) : 0;
}

uint64_t matmul(const at::Tensor& left, const at::Tensor& right) {
  if (!left.defined() || !right.defined() || left.dim() == 0) return 0;
  const int64_t k = left.size(-1);
  // Every row of every batch of `left` (mm, bmm, baddbmm: right's batches pair with left's).
  const int64_t rows = left.numel() / std::max<int64_t>(k, 1);
  const int64_t n = right.dim() >= 2 ? right.size(-1) : 1;
  return static_cast<uint64_t>(2 * rows * k * n);
}

uint64_t convolution(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef padding,
                     at::IntArrayRef stride, at::IntArrayRef dilation, bool transposed) {
  if (weight.dim() != input.dim() || weight.size(0) == 0) return 0;
  int64_t elements = input.numel();
  if (!transposed) {
    elements = 1;
    for (int64_t size :
         at::native::conv_output_size(input.sizes(), weight.sizes(), padding, stride, dilation)) {
      elements *= size;
    }
  }
  return static_cast<uint64_t>(2 * elements * (weight.numel() / weight.size(0)));
}

uint64_t convolution_backward(const at::Tensor& input, const at::Tensor& weight,
                              at::IntArrayRef padding, at::IntArrayRef stride,
                              at::IntArrayRef dilation, bool transposed, bool grad_input,
                              bool grad_weight) {
  const uint64_t one_pass = convolution(input, weight, padding, stride, dilation, transposed);
  return (grad_input ? one_pass : 0) + (grad_weight ? one_pass : 0);
}

uint64_t attention(const at::Tensor& q, const at::Tensor& k) {
  if (q.dim() != 4 || k.dim() != 4) return 0;
  return static_cast<uint64_t>(4 * q.size(0) * q.size(1) * q.size(2) * k.size(2) * q.size(3));
}

uint64_t attention_backward(const at::Tensor& q, const at::Tensor& k, bool mask_gradient) {
  const uint64_t one_pass = attention(q, k);
  return 2 * one_pass + one_pass / 2 + (mask_gradient ? one_pass : 0);
}

// LSTM forward: each of the 4 gates sums input and hidden pre-activations (1) and the two biases
// (2); c' = f*c + i*g (3), h' = o*tanh(c') (1); sigmoid x3 and tanh x2.
CellWork lstm_cell_forward(bool has_bias) { return {4 * (1 + (has_bias ? 2u : 0u)) + 4, 5}; }
// LSTM backward: tanh(c') (Scalar); d(o) = go*tanh(c') (1); dc = go*o*(1-t*t) + gc (5); the gate
// products dc*g, dc*c, dc*i (3); dc*f (1); the sigmoid/tanh derivatives (3+3+3+3).
CellWork lstm_cell_backward() { return {22, 1}; }
// GRU forward: r and z sum input and hidden (1) and the biases (2); n = in (+b) + r*(hn (+b))
// (2, +2 with bias); h' = n + z*(h-n) (3); sigmoid x2 and tanh x1.
CellWork gru_cell_forward(bool has_bias) { return {1 + 1 + 2 + 3 + (has_bias ? 6u : 0u), 3}; }
// GRU backward: 1-z (1); dz = go*(h-n)*(1-z)*z (4); dh = go*z (1); dn = go*(1-z)*(1-n*n) (4);
// dhn = dn*r (1); dr = dn*hn*(1-r)*r (4).
CellWork gru_cell_backward() { return {15, 0}; }

uint64_t none(const c10::FunctionSchema&, KernelArgs) { return 0; }

uint64_t per_element(const c10::FunctionSchema&, KernelArgs args) {
  int64_t largest = 0;
  for (const auto& a : args) largest = std::max(largest, numel_of(a));
  return static_cast<uint64_t>(largest);
}

uint64_t matmul_by_schema(const c10::FunctionSchema& schema, KernelArgs args) {
  const at::Tensor* left = nullptr;
  const at::Tensor* self = nullptr;
  const at::Tensor* right = nullptr;
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const std::string& n = arguments[i].name();
    if (n == "mat1" || n == "batch1" || n == "mat" || n == "vec1") {
      left = &args[i].toTensor();
    } else if (n == "self") {
      self = &args[i].toTensor();
    } else if (!right && (n == "mat2" || n == "batch2" || n == "vec" || n == "tensor" ||
                          n == "vec2")) {
      right = &args[i].toTensor();
    }
  }
  if (left == nullptr) left = self;
  if (left == nullptr || right == nullptr) return 0;
  return matmul(*left, *right);
}

uint64_t factorization(const c10::FunctionSchema&, KernelArgs args) {
  uint64_t largest = 0;
  for (const auto& a : args) {
    if (!a.isTensor() || !a.toTensor().defined() || a.toTensor().dim() < 2) continue;
    const at::Tensor& t = a.toTensor();
    const int64_t m = t.size(-2);
    const int64_t n = t.size(-1);
    const int64_t batch = t.numel() / std::max<int64_t>(m * n, 1);
    largest = std::max<uint64_t>(largest, 2 * batch * m * n * std::min(m, n));
  }
  return largest;
}

}  // namespace torch_neuronx::flops
