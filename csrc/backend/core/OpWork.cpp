#include "backend/core/OpWork.h"

#include <algorithm>
#include <initializer_list>
#include <unordered_map>

#include "backend/core/BoxedArgs.h"
#include "runtime/InstancePreset.h"

namespace torch_neuronx {

namespace {

using nrtsim::Engine;
using nrtsim::LaunchKind;

std::unordered_map<std::string, OpFamily>& families() {
  static auto* map = new std::unordered_map<std::string, OpFamily>();
  return *map;
}

// "aten::add.Tensor" -> "aten::add".
std::string base_of(const std::string& name) { return name.substr(0, name.find('.')); }

bool is_one_of(const std::string& base, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (base == n) return true;
  }
  return false;
}

// The tensor argument of one of `names`, in the order the names are given; nullptr if none.
const at::Tensor* tensor_named(const c10::FunctionSchema& schema, KernelArgs args,
                               std::initializer_list<const char*> names) {
  const auto& arguments = schema.arguments();
  for (const char* n : names) {
    for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
      if (args[i].isTensor() && arguments[i].name() == n) return &args[i].toTensor();
    }
  }
  return nullptr;
}

const c10::IValue* argument_named(const c10::FunctionSchema& schema, KernelArgs args,
                                  const char* name) {
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (arguments[i].name() == name) return &args[i];
  }
  return nullptr;
}

std::vector<int64_t> ints_named(const c10::FunctionSchema& schema, KernelArgs args,
                                const char* name) {
  const c10::IValue* v = argument_named(schema, args, name);
  TORCH_CHECK(v != nullptr, "op work: ", schema.name(), " has no argument '", name, "'");
  return v->toIntVector();
}

// A view or an alias of an argument: it moves no data.
bool returns_alias(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns()) {
    if (r.alias_info() != nullptr && !r.alias_info()->isWrite()) return true;
  }
  return false;
}

// Ops that only allocate or relabel memory: no launch does arithmetic or moves bytes for them.
bool touches_no_memory(const std::string& base) {
  return is_one_of(base, {"aten::empty", "aten::empty_like", "aten::empty_strided",
                          "aten::new_empty", "aten::new_empty_strided", "aten::resize_",
                          "aten::set_", "aten::lift_fresh", "aten::lift_fresh_copy",
                          "aten::sym_size", "aten::sym_stride", "aten::sym_numel",
                          "aten::sym_storage_offset"});
}

// Factories that run as an allocation plus one fill (memset on the Vector engine).
bool is_fill(const std::string& base) {
  return is_one_of(base, {"aten::zeros", "aten::ones", "aten::full", "aten::zeros_like",
                          "aten::ones_like", "aten::full_like", "aten::new_zeros",
                          "aten::new_ones", "aten::new_full", "aten::scalar_tensor"});
}

// Device-to-device copies: the DMA engines read the source and write the destination.
bool is_copy(const std::string& base) {
  return is_one_of(base, {"aten::_copy_from", "aten::_copy_from_and_resize", "aten::copy_",
                          "aten::copy", "aten::_to_copy", "aten::clone"});
}

// The dedicated rules, by op.
enum class Rule : uint8_t {
  kNone,
  kAttention,
  kAttentionBackward,
  kConvolution,
  kConvolutionBackward,
  kGroupedMm,
  kFill,
  kCopy,
  kScalarRead,
};

Rule rule_of(const std::string& name) {
  const std::string base = base_of(name);
  if (name == "aten::_scaled_dot_product_fused_attention_overrideable") return Rule::kAttention;
  if (name == "aten::_scaled_dot_product_fused_attention_overrideable_backward") {
    return Rule::kAttentionBackward;
  }
  if (base == "aten::convolution" || base == "aten::convolution_overrideable") {
    return Rule::kConvolution;
  }
  if (base == "aten::convolution_backward" || base == "aten::convolution_backward_overrideable") {
    return Rule::kConvolutionBackward;
  }
  if (name == "aten::_grouped_mm") return Rule::kGroupedMm;
  if (is_fill(base)) return Rule::kFill;
  if (is_copy(base)) return Rule::kCopy;
  if (base == "aten::_local_scalar_dense") return Rule::kScalarRead;
  return Rule::kNone;
}

bool reads_argument(const c10::Argument& argument, Access access) {
  if (argument.is_out()) return false;  // an out= argument's old contents are not read
  return !(access == Access::kIgnoresSelf && argument.name() == "self");
}

void read_arguments(Cost& cost, const c10::FunctionSchema& schema, KernelArgs args, Access access) {
  const auto& arguments = schema.arguments();
  const bool rows_in_place = access == Access::kWritesIndexedRows &&
                             rows_written_in_place(schema, args) != nullptr;
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (!reads_argument(arguments[i], access)) continue;
    if (rows_in_place && arguments[i].name() == "self") continue;
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

const at::Tensor& tensor_at(KernelArgs args, size_t i) { return args.at(i).toTensor(); }

std::optional<at::Tensor> optional_tensor_at(KernelArgs args, size_t i) {
  if (i >= args.size() || !args[i].isTensor()) return std::nullopt;
  return args[i].toTensor();
}

}  // namespace

const at::Tensor* rows_written_in_place(const c10::FunctionSchema& schema, KernelArgs args) {
  const at::Tensor* self = nullptr;
  const at::Tensor* rows = nullptr;
  const at::Tensor* destination = nullptr;
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const std::string& name = arguments[i].name();
    const auto* alias = arguments[i].alias_info();
    if (name == "self") self = &args[i].toTensor();
    if (name == "source" || name == "values") rows = &args[i].toTensor();
    if (alias != nullptr && alias->isWrite()) destination = &args[i].toTensor();
  }
  if (self == nullptr || rows == nullptr || destination == nullptr || !self->defined() ||
      !destination->defined()) {
    return nullptr;
  }
  // In place: the destination is self (an in-place self), or out= over self's own storage.
  if (destination != self && !(destination->is_same(*self) ||
                               (destination->storage().is_alias_of(self->storage()) &&
                                destination->storage_offset() == self->storage_offset() &&
                                destination->sizes() == self->sizes() &&
                                destination->strides() == self->strides()))) {
    return nullptr;
  }
  return rows;
}

namespace {

// The family of `overload`, or, for the in-place form of a structured op (add_.Tensor,
// index_copy_), which neuron runs as its .out overload with out=self, that overload's family.
const OpFamily* family_of(const std::string& overload) {
  if (const OpFamily* family = find_op_family(overload)) return family;
  const size_t dot = overload.find('.');
  const std::string base = overload.substr(0, dot);
  if (base.empty() || base.back() != '_') return nullptr;
  const std::string functional = base.substr(0, base.size() - 1);
  if (const OpFamily* family = find_op_family(functional + ".out")) return family;
  if (dot != std::string::npos) return find_op_family(functional + overload.substr(dot) + "_out");
  return nullptr;
}

}  // namespace

void add_op_family(const std::string& overload, const OpFamily& family) {
  families()[overload] = family;
}

const OpFamily* find_op_family(const std::string& overload) {
  auto it = families().find(overload);
  return it == families().end() ? nullptr : &it->second;
}

bool has_dedicated_rule(const std::string& overload) { return rule_of(overload) != Rule::kNone; }

const char* work_source_name(WorkSource source) {
  switch (source) {
    case WorkSource::kFamily: return "family";
    case WorkSource::kKernel: return "kernel";
    case WorkSource::kCopy: return "copy";
    case WorkSource::kNone: return "none";
    case WorkSource::kDefault: return "default";
  }
  return "default";
}

const nrtsim::TensorTiles& default_tensor_tiles() {
  static const std::string chip = nrtsim::find_preset(nrtsim::kDefaultInstance).chip.name;
  return nrtsim::tensor_tiles_of(chip.c_str());
}

uint64_t matmul_tiles_by_schema(const nrtsim::TensorTiles& tiles, const c10::FunctionSchema& schema,
                                KernelArgs args) {
  // The same argument names as flops::matmul_by_schema: addmm's `self` is the bias, mm's the
  // left matrix.
  const at::Tensor* left = tensor_named(schema, args, {"mat1", "batch1", "mat", "vec1"});
  if (left == nullptr) left = tensor_named(schema, args, {"self"});
  const at::Tensor* right = tensor_named(schema, args, {"mat2", "batch2", "vec", "tensor", "vec2"});
  if (left == nullptr || right == nullptr || !left->defined() || !right->defined() ||
      left->dim() == 0) {
    return 0;
  }
  const int64_t k = left->size(-1);
  const int64_t m = left->dim() >= 2 ? left->size(-2) : 1;
  const int64_t batch = left->numel() / std::max<int64_t>(m * k, 1);
  const int64_t n = right->dim() >= 2 ? right->size(-1) : 1;
  return nrtsim::matmul_tile_flops(tiles, batch, m, k, n);
}

namespace work {

Cost attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
               const std::optional<at::Tensor>& mask) {
  Cost cost(Engine::kTensor);
  cost.number_format_of(q).reads(q).reads(k).reads(v);
  if (mask.has_value()) cost.reads(*mask);
  cost.ops(flops::attention(q, k));
  return cost;
}

Cost attention_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                        const at::Tensor& v, const at::Tensor& mask, const at::Tensor& out,
                        const at::Tensor& logsumexp, bool mask_gradient) {
  Cost cost(Engine::kTensor);
  // The logsumexp is float32 whatever q's dtype: its bytes count, not its number format.
  cost.number_format_of(q).reads(grad_out).reads(q).reads(k).reads(v).reads(out).reads(logsumexp);
  cost.reads(mask);  // undefined: nothing
  cost.ops(flops::attention_backward(q, k, mask_gradient && mask.defined()));
  return cost;
}

Cost convolution(const at::Tensor& input, const at::Tensor& weight,
                 const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                 at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed) {
  Cost cost(Engine::kTensor);
  cost.reads(input).reads(weight);
  if (bias.has_value()) cost.reads(*bias);
  cost.ops(flops::convolution(input, weight, padding, stride, dilation, transposed));
  return cost;
}

Cost convolution_backward(const at::Tensor& grad_output, const at::Tensor& input,
                          const at::Tensor& weight, at::IntArrayRef stride,
                          at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                          bool grad_input, bool grad_weight) {
  Cost cost(Engine::kTensor);
  cost.reads(grad_output).reads(input).reads(weight);
  cost.ops(flops::convolution_backward(input, weight, padding, stride, dilation, transposed,
                                       grad_input, grad_weight));
  return cost;
}

}  // namespace work

OpWork op_work(const c10::OperatorHandle& op, KernelArgs args, c10::ArrayRef<at::Tensor> outputs,
               const nrtsim::TensorTiles& tiles) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = op_name(op.operator_name());
  const std::string base = base_of(name);
  OpWork result;
  auto finish = [&](Cost& cost, WorkSource source) {
    for (const auto& t : outputs) cost.writes(t);
    result.work = cost.work();
    result.source = source;
    return result;
  };

  if (const OpFamily* family = family_of(name)) {
    Cost cost(family->engine);
    read_arguments(cost, schema, args, family->access);
    uint64_t ops = family->flops(schema, args);
    if (family->flops == &flops::per_element) {
      // The largest argument *or result*: a broadcast's output is larger than its inputs.
      for (const auto& t : outputs) ops = std::max(ops, flops::elementwise(t));
    }
    cost.ops(ops);
    if (family->tiles != nullptr) result.tensor_tile_ops = family->tiles(tiles, schema, args);
    if (family->access == Access::kWritesIndexedRows) {
      if (const at::Tensor* rows = rows_written_in_place(schema, args)) {
        cost.write_bytes(bytes_of_elements(*rows));
        result.work = cost.work();
        result.source = WorkSource::kFamily;
        return result;
      }
    }
    return finish(cost, WorkSource::kFamily);
  }
  if (returns_alias(schema) || touches_no_memory(base)) {
    result.source = WorkSource::kNone;
    return result;
  }

  switch (rule_of(name)) {
    case Rule::kAttention: {
      Cost cost = work::attention(tensor_at(args, 0), tensor_at(args, 1), tensor_at(args, 2),
                                  optional_tensor_at(args, 3));
      // No tile model yet: the estimate charges attention its FLOPs (tensor_tile_ops 0).
      result.attention = true;
      // The kernel writes the output and the logsumexp; the other results are empty
      // placeholders (a meta function may give them a shape).
      outputs = outputs.slice(0, std::min<size_t>(outputs.size(), 2));
      return finish(cost, WorkSource::kKernel);
    }
    case Rule::kAttentionBackward: {
      const at::Tensor mask =
          args.at(4).isTensor() ? args.at(4).toTensor() : at::Tensor();
      const bool mask_gradient = mask.defined() && args.at(5).toBoolList().get(3);
      Cost cost = work::attention_backward(tensor_at(args, 0), tensor_at(args, 1), tensor_at(args, 2),
                                           tensor_at(args, 3), mask, tensor_at(args, 6),
                                           tensor_at(args, 7), mask_gradient);
      result.attention = true;
      return finish(cost, WorkSource::kKernel);
    }
    case Rule::kConvolution: {
      const at::Tensor* bias = tensor_named(schema, args, {"bias"});
      Cost cost = work::convolution(
          *tensor_named(schema, args, {"input"}), *tensor_named(schema, args, {"weight"}),
          bias != nullptr && bias->defined() ? std::optional<at::Tensor>(*bias) : std::nullopt,
          ints_named(schema, args, "stride"), ints_named(schema, args, "padding"),
          ints_named(schema, args, "dilation"), argument_named(schema, args, "transposed")->toBool());
      return finish(cost, WorkSource::kKernel);
    }
    case Rule::kConvolutionBackward: {
      const auto mask = argument_named(schema, args, "output_mask")->toBoolList();
      Cost cost = work::convolution_backward(
          *tensor_named(schema, args, {"grad_output"}), *tensor_named(schema, args, {"input"}),
          *tensor_named(schema, args, {"weight"}), ints_named(schema, args, "stride"),
          ints_named(schema, args, "padding"), ints_named(schema, args, "dilation"),
          argument_named(schema, args, "transposed")->toBool(), mask.get(0), mask.get(1));
      return finish(cost, WorkSource::kKernel);
    }
    case Rule::kGroupedMm: {
      // MoE experts: rows of `self` [S, K] grouped by expert against mat2 [E, K, N] (offs say where
      // each group ends). Each row meets one expert: 2 S K N FLOPs. At most min(E, S) experts have
      // rows, and only their weights are read (batch-1 decode reads top-k experts, not all E).
      const at::Tensor& rows = tensor_at(args, 0);
      const at::Tensor& weights = tensor_at(args, 1);
      Cost cost(Engine::kTensor);
      cost.number_format_of(rows).reads(rows);
      if (rows.dim() == 2 && weights.dim() == 3 && weights.size(0) > 0) {
        const int64_t experts = std::min<int64_t>(weights.size(0), rows.size(0));
        const uint64_t per_expert = bytes_of_elements(weights) / static_cast<uint64_t>(weights.size(0));
        cost.read_bytes(static_cast<uint64_t>(experts) * per_expert);
        const int64_t s_rows = rows.size(0), k = rows.size(1), n = weights.size(2);
        cost.ops(static_cast<uint64_t>(2 * s_rows * k * n));
        result.tensor_tile_ops = nrtsim::matmul_tile_flops(tiles, 1, s_rows, k, n);
      }
      return finish(cost, WorkSource::kKernel);
    }
    case Rule::kFill: {
      // A memset: written, not read.
      Cost cost(Engine::kVector);
      for (const auto& t : outputs) cost.ops(flops::elementwise(t));
      return finish(cost, WorkSource::kKernel);
    }
    case Rule::kCopy: {
      Cost cost(Engine::kDma);
      if (const at::Tensor* src = tensor_named(schema, args, {"src", "self"})) cost.reads(*src);
      result.kind = LaunchKind::kCopyDeviceToDevice;
      return finish(cost, WorkSource::kCopy);
    }
    case Rule::kScalarRead: {
      // item(): the host reads one element.
      Cost cost(Engine::kDma);
      cost.reads(tensor_at(args, 0));
      result.kind = LaunchKind::kScalarRead;
      result.work = cost.work();
      result.source = WorkSource::kCopy;
      return result;
    }
    case Rule::kNone:
      break;
  }
  // No model of this op: one Vector-engine pass over the largest argument or result.
  Cost cost(Engine::kVector);
  read_arguments(cost, schema, args, Access::kReadsInputs);
  uint64_t elements = flops::per_element(schema, args);
  for (const auto& t : outputs) elements = std::max(elements, flops::elementwise(t));
  cost.ops(elements);
  return finish(cost, WorkSource::kDefault);
}

}  // namespace torch_neuronx
