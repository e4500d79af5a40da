// LSTM and GRU cells, forward and backward, with CUDA's semantics (_thnn_fused_lstm_cell,
// _thnn_fused_gru_cell and their backward ops). On every device but the CPU, ATen's nn.LSTM,
// nn.GRU, nn.LSTMCell and nn.GRUCell compute a time step's gate pre-activations with mm (separate
// launches) and hand them, with the biases, to these cells. The outputs and the saved workspace
// have CUDA's layout, so the derivative formulas registered for these ops (derivatives.yaml),
// which read the workspace, work unchanged.
//
// The arithmetic is CUDA's: each element's gate math in the op-math type (float for bfloat16 and
// half) from the stored inputs, every stored value rounded once. Sigmoids and tanh are activation
// functions of the Scalar engine; the sums and products run on the Vector engine.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <vector>

#include "backend/core/DeviceCheck.h"
#include "backend/core/FlopModels.h"
#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {
namespace {

// The one place this file touches the launch API: one launch of `op` on `device` that reads
// `inputs` and does `elements` times `per_element` work plus `extra_vector` Vector ops; `body`
// gets contiguous host views of the inputs (undefined stays undefined) and returns its fresh CPU
// results, which become the neuron results (allocated in HBM already).
template <size_t N, class Body>
std::array<at::Tensor, N> launch_cell(const char* op, c10::Device device,
                                      std::initializer_list<const at::Tensor*> inputs,
                                      uint64_t elements, flops::CellWork per_element,
                                      uint64_t extra_vector, Body&& body) {
  check_input_devices(op, device, inputs);
  Kernel kernel(op, device, Engine::kVector);
  for (const at::Tensor* t : inputs) kernel.reads(*t);
  kernel.ops(Engine::kVector, elements * per_element.vector + extra_vector)
      .ops(Engine::kScalar, elements * per_element.scalar);
  std::array<at::Tensor, N> results;
  kernel.run([&] {
    std::vector<at::Tensor> views;
    views.reserve(inputs.size());
    for (const at::Tensor* t : inputs) {
      views.push_back(t->defined() ? host_view(*t).contiguous() : at::Tensor());
    }
    std::array<at::Tensor, N> host = body(views);
    for (size_t i = 0; i < N; ++i) {
      if (host[i].defined()) results[i] = kernel.result(host[i]);
    }
  });
  return results;
}

// --- argument checks ------------------------------------------------------------------------

const char* shape_name(int64_t factor) {
  return factor == 4 ? "[batch, 4 * hidden_size]" : "[batch, 3 * hidden_size]";
}

void check_dtypes(const char* op, const at::Tensor& first,
                  std::initializer_list<std::pair<const char*, const at::Tensor*>> others) {
  const auto dtype = first.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf ||
                  dtype == at::kDouble,
              op, " on neuron: expected float32, bfloat16, float16 or float64 tensors, got ",
              dtype, ". Convert the module and its inputs to one of these (module.to(dtype)).");
  for (const auto& [name, t] : others) {
    TORCH_CHECK(!t->defined() || t->scalar_type() == dtype, op, " on neuron: ", name, " is ",
                t->scalar_type(), " but the gates are ", dtype,
                "; give every argument the same dtype (convert the module and its inputs, or "
                "the hidden state, with .to(", dtype, ")).");
  }
}

// The forward cells' arguments, as CUDA checks them (and a little stricter: the previous state
// must be [batch, hidden_size], not just hold that many elements). Returns {batch, hidden_size}.
std::pair<int64_t, int64_t> check_cell_forward(const char* op, int64_t factor,
                                               const at::Tensor& input_gates,
                                               const at::Tensor& hidden_gates,
                                               const at::Tensor& prev, const char* prev_name,
                                               const at::Tensor& input_bias,
                                               const at::Tensor& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.size(1) % factor == 0, op,
              " on neuron: input_gates must be 2-D ", shape_name(factor), ", got ",
              input_gates.sizes());
  TORCH_CHECK(hidden_gates.sizes() == input_gates.sizes(), op,
              " on neuron: hidden_gates must have input_gates' shape ", input_gates.sizes(),
              ", got ", hidden_gates.sizes());
  const int64_t batch = input_gates.size(0);
  const int64_t hidden = input_gates.size(1) / factor;
  TORCH_CHECK(prev.dim() == 2 && prev.size(0) == batch && prev.size(1) == hidden, op,
              " on neuron: ", prev_name, " must be [batch, hidden_size] = [", batch, ", ", hidden,
              "] to match the gates ", input_gates.sizes(), ", got ", prev.sizes());
  TORCH_CHECK(input_bias.defined() == hidden_bias.defined(), op,
              " on neuron: give both input_bias and hidden_bias or neither");
  if (input_bias.defined()) {
    TORCH_CHECK(input_bias.dim() == 1 && input_bias.size(0) == input_gates.size(1) &&
                    hidden_bias.sizes() == input_bias.sizes(),
                op, " on neuron: input_bias and hidden_bias must be 1-D [", input_gates.size(1),
                "] (the gates' width), got ", input_bias.sizes(), " and ", hidden_bias.sizes());
  }
  check_dtypes(op, input_gates,
               {{"hidden_gates", &hidden_gates}, {prev_name, &prev}, {"input_bias", &input_bias},
                {"hidden_bias", &hidden_bias}});
  return {batch, hidden};
}

// Rows per parallel task: ATen's elementwise grain (at::internal::GRAIN_SIZE) in elements, so a
// small batch runs on the calling thread instead of paying for a parallel region.
constexpr int64_t kGrainElements = 32768;
int64_t grain_rows(int64_t row_elements) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, row_elements));
}

template <class T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

template <class Acc>
Acc sigmoid(Acc x) {
  return Acc(1) / (Acc(1) + std::exp(-x));
}

// --- LSTM -----------------------------------------------------------------------------------
// Gate order i, f, g (cell candidate), o, each a block of hidden_size columns. The workspace
// [batch, 4 * hidden_size] keeps the activated gates in that order.

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias_opt,
    const std::optional<at::Tensor>& hidden_bias_opt) {
  constexpr const char* kOp = "aten::_thnn_fused_lstm_cell";
  const at::Tensor input_bias = input_bias_opt.value_or(at::Tensor());
  const at::Tensor hidden_bias = hidden_bias_opt.value_or(at::Tensor());
  const auto [batch, hidden] = check_cell_forward(kOp, 4, input_gates, hidden_gates, cx, "cx",
                                                  input_bias, hidden_bias);
  const bool has_bias = input_bias.defined();
  auto [hy, cy, workspace] = launch_cell<3>(
      kOp, input_gates.device(), {&input_gates, &hidden_gates, &cx, &input_bias, &hidden_bias},
      static_cast<uint64_t>(batch * hidden), flops::lstm_cell_forward(has_bias), 0,
      [&, batch = batch, hidden = hidden](const std::vector<at::Tensor>& in) {
        at::Tensor hy = at::empty({batch, hidden}, in[0].options());
        at::Tensor cy = at::empty({batch, hidden}, in[0].options());
        at::Tensor ws = at::empty({batch, 4 * hidden}, in[0].options());
        AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in[0].scalar_type(), kOp, [&] {
          using Acc = at::opmath_type<scalar_t>;
          const scalar_t* ig = in[0].const_data_ptr<scalar_t>();
          const scalar_t* hg = in[1].const_data_ptr<scalar_t>();
          const scalar_t* c_prev = in[2].const_data_ptr<scalar_t>();
          const scalar_t* b1 = data_or_null<scalar_t>(in[3]);
          const scalar_t* b2 = data_or_null<scalar_t>(in[4]);
          scalar_t* h_out = hy.mutable_data_ptr<scalar_t>();
          scalar_t* c_out = cy.mutable_data_ptr<scalar_t>();
          scalar_t* w = ws.mutable_data_ptr<scalar_t>();
          at::parallel_for(0, batch, grain_rows(4 * hidden), [&](int64_t begin, int64_t end) {
            for (int64_t b = begin; b < end; ++b) {
              const int64_t row = b * 4 * hidden;
              for (int64_t j = 0; j < hidden; ++j) {
                Acc pre[4];
                for (int64_t k = 0; k < 4; ++k) {
                  const int64_t col = k * hidden + j;
                  // CUDA's order: ((input + hidden) + input_bias) + hidden_bias.
                  Acc z = static_cast<Acc>(ig[row + col]) + static_cast<Acc>(hg[row + col]);
                  if (b1 != nullptr) z = z + static_cast<Acc>(b1[col]) + static_cast<Acc>(b2[col]);
                  pre[k] = z;
                }
                const Acc i = sigmoid(pre[0]);
                const Acc f = sigmoid(pre[1]);
                const Acc g = std::tanh(pre[2]);
                const Acc o = sigmoid(pre[3]);
                const Acc c = f * static_cast<Acc>(c_prev[b * hidden + j]) + i * g;
                c_out[b * hidden + j] = static_cast<scalar_t>(c);
                h_out[b * hidden + j] = static_cast<scalar_t>(o * std::tanh(c));
                w[row + j] = static_cast<scalar_t>(i);
                w[row + hidden + j] = static_cast<scalar_t>(f);
                w[row + 2 * hidden + j] = static_cast<scalar_t>(g);
                w[row + 3 * hidden + j] = static_cast<scalar_t>(o);
              }
            }
          });
        });
        return std::array<at::Tensor, 3>{hy, cy, ws};
      });
  return {hy, cy, workspace};
}

// Returns (grad_gates, grad_cx, grad_bias): grad_gates is the gradient of both pre-activation
// inputs (they enter the gates as a sum), grad_bias its sum over the batch when the forward had
// biases. Either incoming gradient may be absent (taken as zero); with neither, nothing is
// computed, as on CUDA.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy_opt, const std::optional<at::Tensor>& grad_cy_opt,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  constexpr const char* kOp = "aten::_thnn_fused_lstm_cell_backward_impl";
  const at::Tensor grad_hy = grad_hy_opt.value_or(at::Tensor());
  const at::Tensor grad_cy = grad_cy_opt.value_or(at::Tensor());
  if (!grad_hy.defined() && !grad_cy.defined()) return {};
  const at::Tensor& grad = grad_hy.defined() ? grad_hy : grad_cy;
  TORCH_CHECK(grad.dim() == 2, kOp, " on neuron: the output gradients must be 2-D [batch, "
              "hidden_size], got ", grad.sizes());
  const int64_t batch = grad.size(0);
  const int64_t hidden = grad.size(1);
  const std::initializer_list<std::pair<const char*, const at::Tensor*>> same_shape{
      {"grad_hy", &grad_hy}, {"grad_cy", &grad_cy}, {"cx", &cx}, {"cy", &cy}};
  for (const auto& [name, t] : same_shape) {
    TORCH_CHECK(!t->defined() || t->sizes() == grad.sizes(), kOp, " on neuron: ", name,
                " must be [batch, hidden_size] = ", grad.sizes(), ", got ", t->sizes());
  }
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(0) == batch &&
                  workspace.size(1) == 4 * hidden,
              kOp, " on neuron: workspace must be [batch, 4 * hidden_size] = [", batch, ", ",
              4 * hidden, "] (the forward's third result), got ", workspace.sizes());
  check_dtypes(kOp, workspace,
               {{"grad_hy", &grad_hy}, {"grad_cy", &grad_cy}, {"cx", &cx}, {"cy", &cy}});
  auto [grad_gates, grad_cx, grad_bias] = launch_cell<3>(
      kOp, workspace.device(), {&grad_hy, &grad_cy, &cx, &cy, &workspace},
      static_cast<uint64_t>(batch * hidden), flops::lstm_cell_backward(),
      has_bias ? static_cast<uint64_t>(batch * 4 * hidden) : 0,  // the bias gradient's sum
      [&](const std::vector<at::Tensor>& in) {
        at::Tensor gates = at::empty({batch, 4 * hidden}, in[4].options());
        at::Tensor gcx = at::empty({batch, hidden}, in[4].options());
        AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in[4].scalar_type(), kOp, [&] {
          using Acc = at::opmath_type<scalar_t>;
          const scalar_t* gh = data_or_null<scalar_t>(in[0]);
          const scalar_t* gc = data_or_null<scalar_t>(in[1]);
          const scalar_t* c_prev = in[2].const_data_ptr<scalar_t>();
          const scalar_t* c_next = in[3].const_data_ptr<scalar_t>();
          const scalar_t* w = in[4].const_data_ptr<scalar_t>();
          scalar_t* dg = gates.mutable_data_ptr<scalar_t>();
          scalar_t* dc_prev = gcx.mutable_data_ptr<scalar_t>();
          at::parallel_for(0, batch, grain_rows(4 * hidden), [&](int64_t begin, int64_t end) {
            for (int64_t b = begin; b < end; ++b) {
              const int64_t row = b * 4 * hidden;
              for (int64_t j = 0; j < hidden; ++j) {
                const int64_t e = b * hidden + j;
                const Acc i = static_cast<Acc>(w[row + j]);
                const Acc f = static_cast<Acc>(w[row + hidden + j]);
                const Acc g = static_cast<Acc>(w[row + 2 * hidden + j]);
                const Acc o = static_cast<Acc>(w[row + 3 * hidden + j]);
                const Acc go = gh != nullptr ? static_cast<Acc>(gh[e]) : Acc(0);
                const Acc gco = gc != nullptr ? static_cast<Acc>(gc[e]) : Acc(0);
                const Acc t = std::tanh(static_cast<Acc>(c_next[e]));
                const Acc d_o = go * t;
                // The cell state's gradient: through h' = o*tanh(c') and directly from c'.
                const Acc dc = go * o * (Acc(1) - t * t) + gco;
                dg[row + j] = static_cast<scalar_t>(dc * g * (Acc(1) - i) * i);
                dg[row + hidden + j] =
                    static_cast<scalar_t>(dc * static_cast<Acc>(c_prev[e]) * (Acc(1) - f) * f);
                dg[row + 2 * hidden + j] = static_cast<scalar_t>(dc * i * (Acc(1) - g * g));
                dg[row + 3 * hidden + j] = static_cast<scalar_t>(d_o * (Acc(1) - o) * o);
                dc_prev[e] = static_cast<scalar_t>(dc * f);
              }
            }
          });
        });
        // Summed from the stored (rounded) gate gradients, as CUDA does; ATen's CPU sum
        // accumulates bfloat16 and half in float.
        at::Tensor bias = has_bias ? gates.sum(0) : at::Tensor();
        return std::array<at::Tensor, 3>{gates, gcx, bias};
      });
  return {grad_gates, grad_cx, grad_bias};
}

// --- GRU ------------------------------------------------------------------------------------
// Gate order r (reset), z (update), n (new), each a block of hidden_size columns. The workspace
// [batch, 5 * hidden_size] keeps r, z, n, the previous state, and the hidden n-gate pre-activation
// with its bias (which the reset gate scales).

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias_opt,
    const std::optional<at::Tensor>& hidden_bias_opt) {
  constexpr const char* kOp = "aten::_thnn_fused_gru_cell";
  const at::Tensor input_bias = input_bias_opt.value_or(at::Tensor());
  const at::Tensor hidden_bias = hidden_bias_opt.value_or(at::Tensor());
  const auto [batch, hidden] = check_cell_forward(kOp, 3, input_gates, hidden_gates, hx, "hx",
                                                  input_bias, hidden_bias);
  const bool has_bias = input_bias.defined();
  auto [hy, workspace] = launch_cell<2>(
      kOp, input_gates.device(), {&input_gates, &hidden_gates, &hx, &input_bias, &hidden_bias},
      static_cast<uint64_t>(batch * hidden), flops::gru_cell_forward(has_bias), 0,
      [&, batch = batch, hidden = hidden](const std::vector<at::Tensor>& in) {
        at::Tensor hy = at::empty({batch, hidden}, in[0].options());
        at::Tensor ws = at::empty({batch, 5 * hidden}, in[0].options());
        AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in[0].scalar_type(), kOp, [&] {
          using Acc = at::opmath_type<scalar_t>;
          const scalar_t* ig = in[0].const_data_ptr<scalar_t>();
          const scalar_t* hg = in[1].const_data_ptr<scalar_t>();
          const scalar_t* h_prev = in[2].const_data_ptr<scalar_t>();
          const scalar_t* b1 = data_or_null<scalar_t>(in[3]);
          const scalar_t* b2 = data_or_null<scalar_t>(in[4]);
          scalar_t* h_out = hy.mutable_data_ptr<scalar_t>();
          scalar_t* w = ws.mutable_data_ptr<scalar_t>();
          at::parallel_for(0, batch, grain_rows(5 * hidden), [&](int64_t begin, int64_t end) {
            for (int64_t b = begin; b < end; ++b) {
              const int64_t row = b * 3 * hidden;
              const int64_t wrow = b * 5 * hidden;
              for (int64_t j = 0; j < hidden; ++j) {
                const int64_t r_col = j, z_col = hidden + j, n_col = 2 * hidden + j;
                Acc r_pre = static_cast<Acc>(ig[row + r_col]) + static_cast<Acc>(hg[row + r_col]);
                Acc z_pre = static_cast<Acc>(ig[row + z_col]) + static_cast<Acc>(hg[row + z_col]);
                Acc n_in = static_cast<Acc>(ig[row + n_col]);
                Acc n_hidden = static_cast<Acc>(hg[row + n_col]);
                if (b1 != nullptr) {
                  r_pre = r_pre + static_cast<Acc>(b1[r_col]) + static_cast<Acc>(b2[r_col]);
                  z_pre = z_pre + static_cast<Acc>(b1[z_col]) + static_cast<Acc>(b2[z_col]);
                  n_in = n_in + static_cast<Acc>(b1[n_col]);
                  n_hidden = n_hidden + static_cast<Acc>(b2[n_col]);
                }
                const Acc r = sigmoid(r_pre);
                const Acc z = sigmoid(z_pre);
                const Acc n = std::tanh(n_in + r * n_hidden);
                const scalar_t h_stored = h_prev[b * hidden + j];
                h_out[b * hidden + j] =
                    static_cast<scalar_t>(n + z * (static_cast<Acc>(h_stored) - n));
                w[wrow + j] = static_cast<scalar_t>(r);
                w[wrow + hidden + j] = static_cast<scalar_t>(z);
                w[wrow + 2 * hidden + j] = static_cast<scalar_t>(n);
                w[wrow + 3 * hidden + j] = h_stored;
                w[wrow + 4 * hidden + j] = static_cast<scalar_t>(n_hidden);
              }
            }
          });
        });
        return std::array<at::Tensor, 2>{hy, ws};
      });
  return {hy, workspace};
}

// Returns (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias).
// The two gate gradients differ only in the n block: the hidden n pre-activation is scaled by the
// reset gate.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  constexpr const char* kOp = "aten::_thnn_fused_gru_cell_backward";
  TORCH_CHECK(grad_hy.defined() && grad_hy.dim() == 2, kOp,
              " on neuron: grad_hy must be a 2-D [batch, hidden_size] tensor, got ",
              grad_hy.defined() ? grad_hy.sizes() : at::IntArrayRef{});
  const int64_t batch = grad_hy.size(0);
  const int64_t hidden = grad_hy.size(1);
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(0) == batch &&
                  workspace.size(1) == 5 * hidden,
              kOp, " on neuron: workspace must be [batch, 5 * hidden_size] = [", batch, ", ",
              5 * hidden, "] (the forward's second result), got ", workspace.sizes());
  check_dtypes(kOp, workspace, {{"grad_hy", &grad_hy}});
  auto [grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias] =
      launch_cell<5>(
          kOp, workspace.device(), {&grad_hy, &workspace}, static_cast<uint64_t>(batch * hidden),
          flops::gru_cell_backward(), has_bias ? static_cast<uint64_t>(2 * batch * 3 * hidden) : 0,
          [&](const std::vector<at::Tensor>& in) {
            at::Tensor gi = at::empty({batch, 3 * hidden}, in[1].options());
            at::Tensor gh = at::empty({batch, 3 * hidden}, in[1].options());
            at::Tensor ghx = at::empty({batch, hidden}, in[1].options());
            AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in[1].scalar_type(), kOp,
                                            [&] {
              using Acc = at::opmath_type<scalar_t>;
              const scalar_t* go_data = in[0].const_data_ptr<scalar_t>();
              const scalar_t* w = in[1].const_data_ptr<scalar_t>();
              scalar_t* d_in = gi.mutable_data_ptr<scalar_t>();
              scalar_t* d_hid = gh.mutable_data_ptr<scalar_t>();
              scalar_t* d_hx = ghx.mutable_data_ptr<scalar_t>();
              at::parallel_for(0, batch, grain_rows(5 * hidden), [&](int64_t begin, int64_t end) {
                for (int64_t b = begin; b < end; ++b) {
                  const int64_t row = b * 3 * hidden;
                  const int64_t wrow = b * 5 * hidden;
                  for (int64_t j = 0; j < hidden; ++j) {
                    const Acc r = static_cast<Acc>(w[wrow + j]);
                    const Acc z = static_cast<Acc>(w[wrow + hidden + j]);
                    const Acc n = static_cast<Acc>(w[wrow + 2 * hidden + j]);
                    const Acc h = static_cast<Acc>(w[wrow + 3 * hidden + j]);
                    const Acc hn = static_cast<Acc>(w[wrow + 4 * hidden + j]);
                    const Acc go = static_cast<Acc>(go_data[b * hidden + j]);
                    const Acc one_minus_z = Acc(1) - z;
                    const Acc dz = go * (h - n) * one_minus_z * z;
                    const Acc dn = go * one_minus_z * (Acc(1) - n * n);
                    const Acc dr = dn * hn * (Acc(1) - r) * r;
                    d_in[row + j] = d_hid[row + j] = static_cast<scalar_t>(dr);
                    d_in[row + hidden + j] = d_hid[row + hidden + j] = static_cast<scalar_t>(dz);
                    d_in[row + 2 * hidden + j] = static_cast<scalar_t>(dn);
                    d_hid[row + 2 * hidden + j] = static_cast<scalar_t>(dn * r);
                    d_hx[b * hidden + j] = static_cast<scalar_t>(go * z);
                  }
                }
              });
            });
            at::Tensor bias_in = has_bias ? gi.sum(0) : at::Tensor();
            at::Tensor bias_hid = has_bias ? gh.sum(0) : at::Tensor();
            return std::array<at::Tensor, 5>{gi, gh, ghx, bias_in, bias_hid};
          });
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

}  // namespace
}  // namespace torch_neuronx
