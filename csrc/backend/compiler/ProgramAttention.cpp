// The CPU kernel of ATen's overrideable fused attention (forward) that compiled programs call.
//
// On neuron tensors scaled_dot_product_attention takes the overrideable fused backend
// (ops/Attention.cpp: ATen's CPU flash attention on the device buffers). A program is CPU code
// over host views, and ATen gives the overrideable ops no CPU kernel (their default raises), so
// the compiler gives them one: the same flash attention, with the outputs in the layouts of the
// op's meta kernel, which Inductor planned the program's buffers with (and checks). The backward
// (with the float mask's gradient) is in torch_neuronx/dynamo/attention.py. Since 2026-12-06 a
// program's CPU graph calls ATen's own CPU flash attention op wherever it computes every output
// the graph uses (attention.py, use_cpu_attention_ops: the C++ wrapper's C shims would bypass this
// kernel), so this kernel serves the rest: graphs that use the op's other outputs. It was written
// in C++ when a decode step called it once per layer, where a Python kernel cost more than the
// attention. No CPU code path selects the overrideable backend, so it serves only programs.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_native.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <c10/core/SymInt.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>


namespace torch_neuronx {
namespace {

// `result` laid out as the meta kernel lays out the output, in query's dimension order (as
// torch.empty_like(query) when the shapes agree): as is when it already is, else copied.
at::Tensor in_query_layout(const at::Tensor& result, const at::Tensor& query) {
  if (result.sizes() == query.sizes()) {
    if (result.strides() == query.strides()) return result;
    at::Tensor like = at::empty_like(query);
    if (like.strides() == result.strides()) return result;
    like.copy_(result);
    return like;
  }
  const int64_t dims = query.dim();
  std::vector<int64_t> order(dims);
  std::iota(order.begin(), order.end(), 0);
  // Outermost (largest stride) first; ties keep the dimension order.
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
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

// ATen's CPU flash attention with its own threading over (batch, head, query block), as
// Inductor's CPU code runs it.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
fused_attention_cpu(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                    const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                    bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0,
              "neuron fused attention (compiled program) does not apply dropout (dropout_p=",
              dropout_p, "); scaled_dot_product_attention routes dropout to the math backend");
  std::optional<at::Tensor> mask;
  if (attn_bias.has_value() && attn_bias->defined()) mask = *attn_bias;
  at::Tensor out, logsumexp;
  std::tie(out, logsumexp) = at::native::_scaled_dot_product_flash_attention_cpu(
      query, key, value, 0.0, is_causal, mask, scale);
  // The meta kernel's layouts: the output in query's dimension order, a contiguous logsumexp
  // (the CPU kernel's is (B, L, H) transposed).
  out = in_query_layout(out, query);
  logsumexp = logsumexp.contiguous();
  // Unused outputs as the meta kernel has them: no cumulative lengths or debug mask, 0-dim
  // philox seed and offset (no dropout).
  const auto longs = query.options().dtype(at::kLong);
  return {out,
          logsumexp,
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(query.size(2)),
          c10::SymInt(key.size(2)),
          at::zeros({}, longs),
          at::zeros({}, longs),
          at::Tensor()};
}

TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention_cpu));
}

}  // namespace
}  // namespace torch_neuronx
