// scaled_dot_product_attention through PyTorch's "overrideable" fused-attention backend: the one
// fused attention of eager kernels and compiled programs.
//
// The backend choice (the op _fused_sdp_choice and the dispatch stub SDPA itself consults) takes
// the overrideable backend wherever the CPU would take its flash attention (grouped-query heads
// included), so SDPA runs as one fused kernel forward and one backward, computed by ATen's CPU
// flash attention. Everything else takes the math backend, which decomposes into native ops. The
// fused backward also computes the gradient of a float mask, which ATen's CPU flash kernel does
// not.
//
// The computation is written once, on host tensors (attention_on_host,
// attention_backward_on_host), and serves two registrations: the neuron kernels, which run it on
// host views of the device buffers inside one launch each, and the CPU kernels of the same ops,
// which compiled programs (CPU code over host views) call. ATen gives the overrideable ops no CPU
// kernel of its own (their default raises) and no CPU code path selects the overrideable backend,
// so the CPU kernels serve only programs; they return their outputs in the layouts of the ops'
// meta kernels, which Inductor planned the program's buffers with (and checks). Where a program
// uses none of the outputs only this module computes, torch_neuronx/dynamo/attention.py rewrites
// the op into ATen's own CPU flash-attention ops, which Inductor's C++ wrapper calls natively.
#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/core/FlopModels.h"
#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {
namespace {

// Whether ATen's CPU flash kernel, which the fused backend runs, accepts these inputs: the CPU's
// own gates (sdp_utils_cpp.h), without the CPU's runtime switch (neuron's switches are read by
// the caller) and without its refusal of a mask that requires grad (the caller passes the mask
// detached: the fused backward computes that gradient). The mask's last-dim stride is not
// checked: the kernel reads the mask through a CPU view, and the CPU accepts any stride there.
bool fused_kernel_accepts(const sdp::sdp_params& params, bool debug) {
  constexpr std::array<at::ScalarType, 4> kDtypes{at::kFloat, at::kDouble, at::kBFloat16,
                                                  at::kHalf};
  const sdp::sdp_params without_mask{params.query,   params.key,       params.value, std::nullopt,
                                     params.dropout, params.is_causal, params.enable_gqa};
  if (!(sdp::check_nested_tensor(params, debug) && sdp::check_for_dropout(params, debug) &&
        sdp::check_tensor_shapes(params, debug) &&
        sdp::check_batch_size_and_num_heads_dense</*supports_gqa=*/true>(params, debug) &&
        sdp::check_attn_mask_shape(params, debug))) {
    return false;
  }
  const auto head_dim = params.query.sym_size(-1);
  if (params.key.sym_size(-1) != head_dim || params.value.sym_size(-1) != head_dim) {
    if (debug) {
      TORCH_WARN("The neuron fused attention kernel needs query, key and value with the same last "
                 "dimension; got ", params.query.sym_sizes(), ", ", params.key.sym_sizes(), ", ",
                 params.value.sym_sizes(), ".");
    }
    return false;
  }
  return sdp::check_nonzero_sequence_lengths_dense(params, debug) &&
         sdp::check_last_dim_stride_equals_1_dense</*ignore_singleton_dim=*/true>(without_mask,
                                                                                  debug) &&
         sdp::check_tensor_dtype(params, kDtypes, debug);
}

// The answer of torch._fused_sdp_choice for neuron tensors and of the stub SDPA consults, so the
// two always agree. Where the CPU would run its flash kernel, neuron runs the fused kernel; where
// the CPU runs math (a mask that requires grad included: the CPU flash kernel has no mask
// gradient), neuron runs math too while it is enabled -- the same algorithm with the same bf16
// rounding as the CPU. sdpa_kernel() switches: the fused kernel is the OVERRIDEABLE backend and,
// being flash attention, also answers to FLASH_ATTENTION (code written for CUDA or the CPU
// selects it by that name); with math disabled, a mask that requires grad takes the fused kernel.
// With neither usable, an error, as on the CPU and CUDA.
int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  const bool has_mask = mask.has_value() && mask->defined();
  const bool mask_needs_grad = has_mask && mask->requires_grad();
  const std::optional<at::Tensor> mask_values =
      has_mask ? std::optional<at::Tensor>(mask->detach()) : std::nullopt;
  const sdp::sdp_params params{q, k, v, mask_values, dropout_p, is_causal, enable_gqa};

  const auto& ctx = at::globalContext();
  const bool fused_enabled = ctx.userEnabledOverrideableSDP() || ctx.userEnabledFlashSDP();
  const bool math_enabled = ctx.userEnabledMathSDP();
  if (fused_enabled && fused_kernel_accepts(params, /*debug=*/false) &&
      !(mask_needs_grad && math_enabled)) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  if (math_enabled) return static_cast<int64_t>(at::SDPBackend::math);

  if (fused_enabled) fused_kernel_accepts(params, /*debug=*/true);  // warns why it cannot run
  TORCH_CHECK(false, "scaled_dot_product_attention on neuron: no enabled backend can run query ",
              q.sizes(), " ", q.scalar_type(), ", key ", k.sizes(), ", value ", v.sizes(),
              has_mask ? ", a mask" : "", dropout_p > 0 ? ", dropout" : "",
              ". sdpa_kernel() disabled the math backend, and the fused kernel "
              "(SDPBackend.OVERRIDEABLE, also selected by FLASH_ATTENTION) ",
              fused_enabled ? "cannot run these inputs (the warnings above say why)"
                            : "is disabled too",
              ". Allow SDPBackend.MATH (or OVERRIDEABLE for inputs the fused kernel takes) in "
              "sdpa_kernel().");
}

// --- the computation, on host tensors ----------------------------------------------------------

// Whether `attn_bias` is a mask: traced graphs pass an empty tensor for "no mask".
bool has_mask(const std::optional<at::Tensor>& attn_bias) {
  return attn_bias.has_value() && attn_bias->defined() && attn_bias->numel() > 0;
}

void check_no_dropout(double dropout_p, const char* where) {
  TORCH_CHECK(dropout_p == 0.0, "neuron fused attention", where, " does not apply dropout "
              "(dropout_p=", dropout_p, "); scaled_dot_product_attention routes dropout to the math "
              "backend, so call it rather than _scaled_dot_product_fused_attention_overrideable");
}

// (output, logsumexp): ATen's CPU flash attention, with its own threading over (batch, head,
// query block).
std::tuple<at::Tensor, at::Tensor> attention_on_host(const at::Tensor& q, const at::Tensor& k,
                                                     const at::Tensor& v,
                                                     const std::optional<at::Tensor>& mask,
                                                     bool is_causal, std::optional<double> scale) {
  return at::native::_scaled_dot_product_flash_attention_cpu(q, k, v, 0.0, is_causal, mask, scale);
}

// The gradient of an additive float mask. The mask enters the scores S = scale * Q K^T + M
// unscaled, so dL/dM = dL/dS = P * (dP - rowsum(P * dP)) with P = exp(S - logsumexp) (the
// forward's logsumexp, so P is the forward's softmax) and dP = dO V^T, summed over the dims along
// which M was broadcast. Computed in float32 (float64 for double inputs) and rounded once to the
// mask's dtype; rows that the forward masked out entirely (logsumexp = -inf) get a zero gradient.
at::Tensor mask_gradient(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                         const at::Tensor& v, const at::Tensor& mask, const at::Tensor& logsumexp,
                         bool is_causal, std::optional<double> scale) {
  const auto acc = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor keys = k.to(acc);
  at::Tensor values = v.to(acc);
  const int64_t group = q.size(1) / k.size(1);  // grouped-query heads share one key/value head
  if (group > 1) {
    keys = keys.repeat_interleave(group, 1);
    values = values.repeat_interleave(group, 1);
  }
  const double softmax_scale =
      scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor scores = at::matmul(q.to(acc), keys.transpose(-2, -1)).mul_(softmax_scale);
  scores.add_(mask.to(acc));
  if (is_causal) {
    // Top-left aligned, as the CPU kernel applies it: query i sees keys 0..i.
    const auto future = at::ones({q.size(2), k.size(2)}, scores.options().dtype(at::kBool)).triu_(1);
    scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
  }
  const at::Tensor lse = logsumexp.to(acc).unsqueeze(-1);
  const at::Tensor probs =
      at::where(at::isinf(lse) & (lse < 0), at::zeros({}, scores.options()), (scores - lse).exp());
  const at::Tensor grad_probs = at::matmul(grad_out.to(acc), values.transpose(-2, -1));
  const at::Tensor row_dot = (probs * grad_probs).sum(-1, /*keepdim=*/true);
  const at::Tensor grad_scores = probs * (grad_probs - row_dot);
  return at::sum_to(grad_scores, mask.sizes()).to(mask.scalar_type());
}

void check_mask_gradient(const at::Tensor& mask) {
  TORCH_CHECK(at::isFloatingType(mask.scalar_type()),
              "neuron fused attention: a gradient was requested for an attn_mask of dtype ",
              mask.scalar_type(), "; only a float mask (added to the scores) has one");
}

// (grad query, grad key, grad value, grad mask): ATen's CPU flash backward, and the mask's
// gradient when `want_mask_grad` (else undefined).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_backward_on_host(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& logsumexp, const std::optional<at::Tensor>& mask,
    bool is_causal, std::optional<double> scale, bool want_mask_grad) {
  auto [dq, dk, dv] = at::native::_scaled_dot_product_flash_attention_cpu_backward(
      grad_out, q, k, v, out, logsumexp, 0.0, is_causal, mask, scale);
  at::Tensor dmask;
  if (want_mask_grad) dmask = mask_gradient(grad_out, q, k, v, *mask, logsumexp, is_causal, scale);
  return {dq, dk, dv, dmask};
}

// --- the neuron kernels ---------------------------------------------------------------------------

std::optional<at::Tensor> mask_view(const std::optional<at::Tensor>& mask) {
  if (!has_mask(mask)) return std::nullopt;
  return mask->device().is_cpu() ? *mask : host_view(*mask);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                bool return_debug_mask, std::optional<double> scale) {
  check_no_dropout(dropout_p, "");
  at::Tensor out, logsumexp;
  Kernel kernel("aten::_scaled_dot_product_fused_attention_overrideable", q.device(),
                Engine::kTensor);
  kernel.reads(q).reads(k).reads(v).reads(attn_bias).ops(flops::attention(q, k));
  kernel.run([&] {
    auto [o, lse] = attention_on_host(host_view(q), host_view(k), host_view(v),
                                      mask_view(attn_bias), is_causal, scale);
    out = kernel.result(o);
    logsumexp = kernel.result(lse);
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
  check_no_dropout(dropout_p, "");
  const bool want_mask_grad = grad_input_mask[3] && has_mask(attn_bias);
  if (want_mask_grad) check_mask_gradient(attn_bias);
  at::Tensor gq, gk, gv, gmask;
  Kernel kernel("aten::_scaled_dot_product_fused_attention_overrideable_backward", q.device(),
                Engine::kTensor);
  kernel.reads(grad_out).reads(q).reads(k).reads(v).reads(out);
  // The logsumexp is float32 whatever the inputs' dtype: its bytes count, but it must not make
  // the matmuls count at the float32 rate (a bf16 backward would be modelled 4x too slow).
  kernel.cost().read_bytes(bytes_in_memory(logsumexp));
  if (has_mask(attn_bias)) kernel.reads(attn_bias);
  kernel.ops(flops::attention_backward(q, k, want_mask_grad));
  kernel.run([&] {
    auto [dq, dk, dv, dmask] = attention_backward_on_host(
        host_view(grad_out), host_view(q), host_view(k), host_view(v), host_view(out),
        host_view(logsumexp), mask_view(attn_bias), is_causal, scale, want_mask_grad);
    gq = kernel.result(dq);
    gk = kernel.result(dk);
    gv = kernel.result(dv);
    if (want_mask_grad) gmask = kernel.result(dmask);
  });
  return {gq, gk, gv, gmask};
}

// --- the CPU kernels compiled programs call -------------------------------------------------------

// `result` laid out as a meta kernel lays out a tensor like `like` (torch.empty_like(like), or,
// when the sizes differ, `like`'s dimension order): as is when it already is, else copied.
at::Tensor in_layout_of(const at::Tensor& result, const at::Tensor& like) {
  if (result.sizes() == like.sizes()) {
    if (result.strides() == like.strides()) return result;
    at::Tensor laid_out = at::empty_like(like);
    if (laid_out.strides() == result.strides()) return result;
    laid_out.copy_(result);
    return laid_out;
  }
  const int64_t dims = like.dim();
  std::vector<int64_t> order(dims);
  std::iota(order.begin(), order.end(), 0);
  // Outermost (largest stride) first; ties keep the dimension order.
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  std::vector<int64_t> strides(dims);
  int64_t step = 1;
  for (int64_t i = dims - 1; i >= 0; --i) {
    strides[order[i]] = step;
    step *= result.size(order[i]);
  }
  if (result.strides() == c10::IntArrayRef(strides)) return result;
  at::Tensor laid_out = at::empty_strided(result.sizes(), strides, result.options());
  laid_out.copy_(result);
  return laid_out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
fused_attention_program(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& attn_bias, double dropout_p,
                        bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  check_no_dropout(dropout_p, " (compiled program)");
  auto [out, logsumexp] = attention_on_host(
      q, k, v, has_mask(attn_bias) ? attn_bias : std::nullopt, is_causal, scale);
  // The meta kernel's layouts: the output in query's dimension order, a contiguous logsumexp
  // (the CPU kernel's is (B, L, H) transposed); no cumulative lengths or debug mask, 0-dim
  // philox seed and offset (no dropout).
  const auto longs = q.options().dtype(at::kLong);
  return {in_layout_of(out, q),       logsumexp.contiguous(),    at::Tensor(),
          at::Tensor(),               c10::SymInt(q.size(2)),    c10::SymInt(k.size(2)),
          at::zeros({}, longs),       at::zeros({}, longs),      at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward_program(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor&, const at::Tensor&, int64_t, int64_t,
    double dropout_p, bool is_causal, const at::Tensor&, const at::Tensor&,
    std::optional<double> scale) {
  check_no_dropout(dropout_p, " (compiled program)");
  const std::optional<at::Tensor> mask =
      has_mask(attn_bias) ? std::optional<at::Tensor>(attn_bias) : std::nullopt;
  const bool want_mask_grad = grad_input_mask[3] && mask.has_value();
  if (want_mask_grad) check_mask_gradient(attn_bias);
  auto [dq, dk, dv, dmask] = attention_backward_on_host(grad_out, q, k, v, out, logsumexp, mask,
                                                        is_causal, scale, want_mask_grad);
  // The meta kernel's layouts: each gradient laid out as its input.
  return {in_layout_of(dq, q), in_layout_of(dk, k), in_layout_of(dv, v),
          want_mask_grad ? in_layout_of(dmask, attn_bias) : dmask};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // Registered as the op too (not only as the stub SDPA consults), so torch._fused_sdp_choice on
  // neuron tensors answers for neuron instead of running the CPU's choice through the fallback.
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(fused_attention_backward));
}

TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention_program));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(fused_attention_backward_program));
}

}  // namespace
}  // namespace torch_neuronx

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::fused_sdp_choice);
}
