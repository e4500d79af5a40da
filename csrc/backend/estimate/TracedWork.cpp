#include "backend/estimate/TracedWork.h"

#include <algorithm>
#include <cstdint>

#include "backend/core/BoxedArgs.h"
#include "backend/core/Cost.h"
#include "backend/core/FlopModels.h"
#include "backend/core/BoxedHostMath.h"

namespace torch_neuronx::estimate {

namespace {

using nrtsim::Engine;

constexpr int64_t kPartitions = 128;   // contraction rows of the PE array
constexpr int64_t kStationary = 128;   // stationary free size (PE columns)
constexpr int64_t kMoving = 512;       // moving free size per instruction (one PSUM bank)
constexpr int64_t kMinMovingCycles = 64;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Cycles of one assignment: `stationary` columns held in the array, `moving` columns streamed.
int64_t matmul_cycles(int64_t k, int64_t stationary, int64_t moving) {
  const int64_t full = moving / kMoving;
  const int64_t rest = moving % kMoving;
  const int64_t moving_cycles = full * kMoving + (rest > 0 ? std::max(rest, kMinMovingCycles) : 0);
  return ceil_div(k, kPartitions) * ceil_div(stationary, kStationary) * moving_cycles;
}

const at::Tensor* tensor_arg(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                             std::initializer_list<const char*> names) {
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    for (const char* n : names) {
      if (arguments[i].name() == n) return &args[i].toTensor();
    }
  }
  return nullptr;
}

// The tile occupancy of the matmul family's ops, found by the same argument names as
// flops::matmul_by_schema.
uint64_t tile_ops_by_schema(const c10::FunctionSchema& schema, const torch::jit::Stack& args) {
  const at::Tensor* left = tensor_arg(schema, args, {"mat1", "batch1", "mat", "vec1"});
  if (left == nullptr) left = tensor_arg(schema, args, {"self"});
  const at::Tensor* right = tensor_arg(schema, args, {"mat2", "batch2", "vec", "tensor", "vec2"});
  if (left == nullptr || right == nullptr || !left->defined() || !right->defined() ||
      left->dim() == 0) {
    return 0;
  }
  const int64_t k = left->size(-1);
  const int64_t m = left->dim() >= 2 ? left->size(-2) : 1;
  const int64_t batch = left->numel() / std::max<int64_t>(m * k, 1);
  const int64_t n = right->dim() >= 2 ? right->size(-1) : 1;
  return matmul_tile_ops(batch, m, k, n);
}

// Factories neuron runs as an allocation plus one fill: write-only Vector work.
bool is_fill(const std::string& name) {
  const std::string base = name.substr(0, name.find('.'));
  for (const char* f : {"aten::zeros", "aten::ones", "aten::full", "aten::zeros_like",
                        "aten::ones_like", "aten::full_like", "aten::new_zeros", "aten::new_ones",
                        "aten::new_full", "aten::scalar_tensor"}) {
    if (base == f) return true;
  }
  return false;
}

// In-place writes of some rows into a larger tensor (a KV cache's update): only the new rows
// move.
bool is_scatter_into_place(const std::string& name) {
  return name == "aten::index_copy_" || name == "aten::index_put_";
}

bool is_copy(const std::string& name) {
  return name == "aten::_copy_from" || name == "aten::_copy_from_and_resize" ||
         name == "aten::copy_" || name == "aten::_to_copy" || name == "aten::clone";
}

void read_all_inputs(Cost& cost, const c10::FunctionSchema& schema, const torch::jit::Stack& args) {
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (arguments[i].is_out()) continue;  // an out= argument's old contents are not read
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      cost.reads(v.toTensor());
    } else if (v.isTensorList()) {
      for (const auto& t : v.toTensorVector()) cost.reads(t);
    } else if (v.isOptionalTensorList()) {
      for (const auto& t : v.toOptionalTensorVector()) {
        if (t.has_value()) cost.reads(*t);
      }
    }
  }
}

}  // namespace

uint64_t matmul_tile_ops(int64_t batch, int64_t m, int64_t k, int64_t n) {
  if (batch <= 0 || m <= 0 || k <= 0 || n <= 0) return 0;
  const int64_t cycles = std::min(matmul_cycles(k, m, n), matmul_cycles(k, n, m));
  // A cycle of the full array is 128 x 128 multiply-adds.
  return static_cast<uint64_t>(batch * cycles * kPartitions * kStationary * 2);
}

TracedWork traced_work(const c10::OperatorHandle& op, const torch::jit::Stack& arguments,
                       const std::vector<at::Tensor>& outputs) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = op_name(op.operator_name());
  TracedWork result;
  result.op.op = name;

  if (is_scatter_into_place(name)) {
    // The DMA engines read the new rows (and their indices) and write them in place; the rest
    // of the destination is neither read nor written. index_copy_(self, dim, index, source),
    // index_put_(self, indices, values, accumulate).
    Cost cost(Engine::kDma);
    const at::Tensor& rows = name == "aten::index_copy_" ? arguments.at(3).toTensor() : arguments.at(2).toTensor();
    cost.reads(rows);
    if (name == "aten::index_copy_") {
      cost.reads(arguments.at(2).toTensor());
    } else {
      for (const auto& t : arguments.at(1).toOptionalTensorVector()) {
        if (t.has_value()) cost.reads(*t);
      }
    }
    result.op.work = cost.work();
    result.op.work[Engine::kDma].bytes_written = bytes_of_elements(rows);
    result.op.kind = nrtsim::LaunchKind::kCopyDeviceToDevice;
    result.source = WorkSource::kKernel;
    return result;
  }
  if (const OpFamily* family = find_op_family(name)) {
    Cost cost(family->engine);
    read_all_inputs(cost, schema, arguments);
    cost.ops(family->flops(schema, KernelArgs(arguments.data(), arguments.size())));
    for (const auto& t : outputs) cost.writes(t);
    result.op.work = cost.work();
    if (family->engine == Engine::kTensor && family->flops == &flops::matmul_by_schema) {
      result.op.tensor_tile_ops = tile_ops_by_schema(schema, arguments);
    }
    result.source = WorkSource::kFamily;
    return result;
  }

  const auto arg = [&](size_t i) -> const at::Tensor& { return arguments.at(i).toTensor(); };
  if (name == "aten::_scaled_dot_product_fused_attention_overrideable") {
    // As ops/Attention.cpp's fused_attention: q, k, v, bias read; QK^T and PV on the Tensor engine.
    Cost cost(Engine::kTensor);
    cost.reads(arg(0)).reads(arg(1)).reads(arg(2));
    if (arguments.at(3).isTensor()) cost.reads(arg(3));
    cost.ops(flops::attention(arg(0), arg(1)));
    for (const auto& t : outputs) cost.writes(t);
    result.op.work = cost.work();
    // The matmuls stream q, k, v: their dtype sets the Tensor engine's rate, not the float32
    // mask or statistics the kernel also reads.
    result.op.work.precision = precision_of(arg(0).scalar_type());
    result.op.attention = true;
    result.source = WorkSource::kKernel;
  } else if (name == "aten::_scaled_dot_product_fused_attention_overrideable_backward") {
    // As ops/Attention.cpp's fused_attention_backward, with the same FLOP model.
    Cost cost(Engine::kTensor);
    for (size_t i : {0, 1, 2, 3, 6, 7}) cost.reads(arg(i));
    const bool has_mask = arguments.at(4).isTensor() && arg(4).defined();
    if (has_mask) cost.reads(arg(4));
    const bool mask_gradient = has_mask && arguments.at(5).toBoolList().get(3);
    cost.ops(flops::attention_backward(arg(1), arg(2), mask_gradient));
    for (const auto& t : outputs) cost.writes(t);
    result.op.work = cost.work();
    result.op.work.precision = precision_of(arg(1).scalar_type());  // q's dtype (logsumexp is fp32)
    result.op.attention = true;
    result.source = WorkSource::kKernel;
  } else if (name == "aten::convolution_overrideable" ||
             name == "aten::convolution_backward_overrideable") {
    // As ops/Convolution.cpp, with the same FLOP models: one convolution forward; the requested
    // input and weight gradients backward.
    const bool backward = name == "aten::convolution_backward_overrideable";
    const size_t in = backward ? 1 : 0;
    const auto stride = arguments.at(3).toIntVector();
    const auto padding = arguments.at(4).toIntVector();
    const auto dilation = arguments.at(5).toIntVector();
    const bool transposed = arguments.at(6).toBool();
    Cost cost(Engine::kTensor);
    read_all_inputs(cost, schema, arguments);
    if (backward) {
      const auto mask = arguments.at(9).toBoolList();
      cost.ops(flops::convolution_backward(arg(in), arg(in + 1), padding, stride, dilation,
                                           transposed, mask.get(0), mask.get(1)));
    } else {
      cost.ops(flops::convolution(arg(in), arg(in + 1), padding, stride, dilation, transposed));
    }
    for (const auto& t : outputs) cost.writes(t);
    result.op.work = cost.work();
    result.source = WorkSource::kKernel;
  } else if (name == "aten::_grouped_mm") {
    // MoE experts: rows of `self` [S, K] grouped by expert against mat2 [E, K, N] (offs say where
    // each group ends). Each row meets one expert: 2 S K N FLOPs. At most min(E, S) experts have
    // rows, and only their weights are read (batch-1 decode reads top-k experts, not all E).
    const at::Tensor& rows = arg(0);
    const at::Tensor& weights = arg(1);
    Cost cost(Engine::kTensor);
    cost.reads(rows);
    if (rows.dim() == 2 && weights.dim() == 3 && weights.size(0) > 0) {
      const int64_t experts = std::min<int64_t>(weights.size(0), rows.size(0));
      const uint64_t per_expert = bytes_of_elements(weights) / static_cast<uint64_t>(weights.size(0));
      cost.read_bytes(static_cast<uint64_t>(experts) * per_expert);
    }
    if (rows.dim() == 2 && weights.dim() == 3) {
      const int64_t s_rows = rows.size(0), k = rows.size(1), n = weights.size(2);
      cost.ops(static_cast<uint64_t>(2 * s_rows * k * n));
      result.op.tensor_tile_ops = matmul_tile_ops(1, s_rows, k, n);
    }
    for (const auto& t : outputs) cost.writes(t);
    result.op.work = cost.work();
    result.op.work.precision = precision_of(rows.scalar_type());
    result.source = WorkSource::kKernel;
  } else if (is_fill(name)) {
    Cost cost(Engine::kVector);
    for (const auto& t : outputs) {
      cost.writes(t);
      cost.ops(flops::elementwise(t));
    }
    result.op.work = cost.work();
    result.source = WorkSource::kKernel;
  } else if (is_copy(name.substr(0, name.find('.')))) {
    // A device-to-device copy: the DMA engines read the source and write the destination.
    Cost cost(Engine::kDma);
    const at::Tensor* src = tensor_arg(schema, arguments, {"src", "self"});
    if (src != nullptr) cost.reads(*src);
    for (const auto& t : outputs) cost.writes(t);
    result.op.work = cost.work();
    result.op.kind = nrtsim::LaunchKind::kCopyDeviceToDevice;
    result.source = WorkSource::kCopy;
  } else {
    // No model of this op: one Vector-engine pass over the largest argument or result.
    Cost cost(Engine::kVector);
    read_all_inputs(cost, schema, arguments);
    cost.ops(flops::per_element(schema, KernelArgs(arguments.data(), arguments.size())));
    uint64_t largest_out = 0;
    for (const auto& t : outputs) {
      cost.writes(t);
      largest_out = std::max<uint64_t>(largest_out, t.defined() ? t.numel() : 0);
    }
    if (cost.work()[Engine::kVector].ops < largest_out) {
      cost.ops(largest_out - cost.work()[Engine::kVector].ops);
    }
    result.op.work = cost.work();
    result.source = WorkSource::kDefault;
  }
  return result;
}

}  // namespace torch_neuronx::estimate
