// Every FLOP model of the backend, in one place. A model counts the arithmetic a NeuronCore
// would do for an op: multiply-adds count 2, elementwise ops 1 per output element.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <cstdint>

namespace torch_neuronx {

// The op's arguments as a boxed kernel sees them.
using KernelArgs = c10::ArrayRef<c10::IValue>;
// A model for a family of boxed ops, from the schema and the arguments.
using FlopModel = uint64_t (*)(const c10::FunctionSchema& schema, KernelArgs args);

namespace flops {

// One operation per element of `out`.
uint64_t elementwise(const at::Tensor& out);
// left [..., M, K] (or [K]) times right [..., K, N] (or [K]): 2 * rows * K * N.
uint64_t matmul(const at::Tensor& left, const at::Tensor& right);
// Convolution: 2 multiply-adds per output element (input element, transposed) and weight
// element of its group.
uint64_t convolution(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef padding,
                     at::IntArrayRef stride, at::IntArrayRef dilation, bool transposed);
// The input gradient and the weight gradient of a convolution, each a convolution's worth of
// multiply-adds, counted for the gradients requested.
uint64_t convolution_backward(const at::Tensor& input, const at::Tensor& weight,
                              at::IntArrayRef padding, at::IntArrayRef stride,
                              at::IntArrayRef dilation, bool transposed, bool grad_input,
                              bool grad_weight);
// Attention over [B, H, L, E] tensors: QK^T and PV, 2 * 2 * B * H * Lq * Lk * E.
uint64_t attention(const at::Tensor& q, const at::Tensor& k);
// Its backward: the scores and the probabilities' gradient recomputed (QK^T, dO V^T: a forward's
// worth) plus 1.5 passes for dQ, dK, dV; a float mask's gradient one pass more.
uint64_t attention_backward(const at::Tensor& q, const at::Tensor& k, bool mask_gradient);

// Recurrent cells (_thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backward), per hidden
// element (one (batch, unit) pair): additions and products on the Vector engine, sigmoid/tanh on
// the Scalar engine. A bias adds two sums per gate.
struct CellWork {
  uint64_t vector;
  uint64_t scalar;
};
CellWork lstm_cell_forward(bool has_bias);
CellWork lstm_cell_backward();
CellWork gru_cell_forward(bool has_bias);
CellWork gru_cell_backward();

// Boxed-family models.
uint64_t none(const c10::FunctionSchema&, KernelArgs);
// One operation per element of the largest tensor argument or result.
uint64_t per_element(const c10::FunctionSchema&, KernelArgs);
// The multiplied operands found by argument name (addmm's `self` is the bias, mm's the left
// matrix).
uint64_t matmul_by_schema(const c10::FunctionSchema& schema, KernelArgs args);
// A factorization of an m x n matrix: about m * n * min(m, n) multiply-adds per matrix of the
// batch; the largest matrix argument stands for the problem.
uint64_t factorization(const c10::FunctionSchema&, KernelArgs args);

}  // namespace flops
}  // namespace torch_neuronx
