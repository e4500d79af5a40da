// scaled_dot_product_attention through PyTorch's "overrideable" fused-attention backend.
//
// _fused_sdp_choice picks the overrideable backend wherever the CPU would pick its flash attention
// (grouped-query heads included), so SDPA runs as one fused kernel forward and one backward,
// computed by ATen's CPU flash attention on the device buffers. Everything else takes the math
// backend, which decomposes into native ops.
#include <ATen/SDPBackend.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_native.h>
#include <ATen/ops/_fused_sdp_choice_native.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {
namespace {

// The CPU's own backend choice decides (flash attention or math), so a program takes the same
// algorithm, with the same bf16 rounding, on neuron as on the CPU; the choice reads only shapes,
// strides, dtypes and the global sdpa_kernel() switches. Two extra conditions: the fused kernel
// computes no mask gradient and draws no dropout, so those cases take the math backend, whose
// native ops compute the mask gradient and draw dropout from the neuron generator.
int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  const bool mask_needs_grad = mask.has_value() && mask->defined() && mask->requires_grad();
  if (dropout_p > 0 || mask_needs_grad) return static_cast<int64_t>(at::SDPBackend::math);
  const auto cpu_choice = static_cast<at::SDPBackend>(
      at::native::_fused_sdp_choice_cpp(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa));
  return static_cast<int64_t>(cpu_choice == at::SDPBackend::flash_attention
                                  ? at::SDPBackend::overrideable
                                  : at::SDPBackend::math);
}

uint64_t attention_flops(const at::Tensor& q, const at::Tensor& k) {
  // QK^T and PV: 2 * 2 * B * H * Lq * Lk * E.
  return static_cast<uint64_t>(4 * q.size(0) * q.size(1) * q.size(2) * k.size(2) * q.size(3));
}

std::optional<at::Tensor> mask_view(const std::optional<at::Tensor>& mask) {
  if (!mask.has_value() || !mask->defined()) return std::nullopt;
  return mask->device().is_cpu() ? *mask : host_view(*mask);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0,
              "neuron fused attention does not apply dropout; _fused_sdp_choice routes dropout to "
              "the math backend");
  const c10::DeviceGuard guard(q.device());
  at::Tensor out, logsumexp;
  launch_kernel(q.device().index(),
                KernelInfo{"aten::_scaled_dot_product_fused_attention_overrideable",
                           attention_flops(q, k),
                           tensor_bytes(q) + tensor_bytes(k) + 2 * tensor_bytes(v), Engine::kTensor},
                [&] {
                  const HostAllocationsInHbm results_in_hbm(q.device().index());
                  auto [o, lse] = at::native::_scaled_dot_product_flash_attention_cpu(
                      host_view(q), host_view(k), host_view(v), 0.0, is_causal, mask_view(attn_bias),
                      scale);
                  out = move_to_hbm(o, q.device());
                  logsumexp = move_to_hbm(lse, q.device());
                });
  const auto opts = q.options();
  at::Tensor empty = at::empty({0}, opts);
  return {out,   logsumexp, empty, empty, c10::SymInt(q.size(2)), c10::SymInt(k.size(2)),
          at::empty({0}, opts.dtype(at::kLong)), at::empty({0}, opts.dtype(at::kLong)), empty};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor&, const at::Tensor&, int64_t, int64_t,
    double dropout_p, bool is_causal, const at::Tensor&, const at::Tensor&,
    std::optional<double> scale) {
  TORCH_CHECK(!grad_input_mask[3],
              "neuron fused attention does not compute a gradient for attn_mask; _fused_sdp_choice "
              "routes masks that require grad to the math backend");
  const c10::DeviceGuard guard(q.device());
  at::Tensor gq, gk, gv;
  launch_kernel(q.device().index(),
                KernelInfo{"aten::_scaled_dot_product_fused_attention_overrideable_backward",
                           2 * attention_flops(q, k) + attention_flops(q, k) / 2,
                           2 * (tensor_bytes(q) + tensor_bytes(k) + tensor_bytes(v)) +
                               tensor_bytes(grad_out),
                           Engine::kTensor},
                [&] {
                  const HostAllocationsInHbm results_in_hbm(q.device().index());
                  const std::optional<at::Tensor> mask =
                      attn_bias.defined() ? mask_view(attn_bias) : std::nullopt;
                  auto [dq, dk, dv] = at::native::_scaled_dot_product_flash_attention_cpu_backward(
                      host_view(grad_out), host_view(q), host_view(k), host_view(v),
                      host_view(out), host_view(logsumexp), dropout_p, is_causal, mask, scale);
                  gq = move_to_hbm(dq, q.device());
                  gk = move_to_hbm(dk, q.device());
                  gv = move_to_hbm(dv, q.device());
                });
  return {gq, gk, gv, at::Tensor()};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(fused_attention_backward));
}

}  // namespace
}  // namespace torch_neuronx

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::fused_sdp_choice);
}
