// The catch-all for ATen ops without a native neuron kernel: run the op on the CPU and copy the
// results back. Each op is recorded (torch_neuronx.get_fallback_ops()) and warned about once
// (TORCH_NEURONX_FALLBACK_WARN=0 silences the warning).
//
// Before handing over, the fallback enforces what a native kernel would: all tensors on one
// device (CPU scalars and CPU index tensors excepted, as on CUDA), and neuron generators (or the
// device's default generator, where the generator is omitted) replaced by CPU generators drawing
// from the neuron stream, so seeding still governs the op's randomness.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "backend/core/Generator.h"
#include "backend/core/OpTracking.h"

namespace torch_neuronx {
namespace {

std::string op_name(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool warnings_enabled() {
  const char* value = std::getenv("TORCH_NEURONX_FALLBACK_WARN");
  return value == nullptr || (std::strcmp(value, "0") != 0 && std::strcmp(value, "false") != 0 &&
                              std::strcmp(value, "False") != 0);
}

void warn_once(const std::string& name) {
  static std::mutex mutex;
  static auto* warned = new std::set<std::string>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned->insert(name).second) return;
  }
  if (warnings_enabled()) {
    TORCH_WARN("Operator '", name, "' executed via CPU fallback on neuron: it has no native "
               "kernel, so its inputs are copied to the host and its results back, which costs "
               "performance. torch_neuronx.get_fallback_ops() lists every such op; set "
               "TORCH_NEURONX_FALLBACK_WARN=0 to silence this warning.");
  }
}

// CPU tensors that may accompany neuron tensors, as CUDA allows: 0-dim values (wrapped Python
// numbers, scalars) anywhere, and index tensors inside an index list. Returns the neuron device
// the op runs on, if any of its tensors is on neuron.
std::optional<c10::Device> check_devices(const std::string& name,
                                         const c10::FunctionSchema& schema,
                                         const torch::jit::Stack& stack, size_t first) {
  std::optional<c10::Device> neuron;
  std::optional<c10::Device> cpu;
  auto visit = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.device().type() == c10::DeviceType::PrivateUse1) {
      TORCH_CHECK(!neuron || *neuron == t.device(),
                  "Expected all tensors to be on the same device, but found at least two devices, ",
                  *neuron, " and ", t.device(), "! (when checking arguments for ", name, ")");
      neuron = t.device();
    } else if (t.dim() > 0 || !t.device().is_cpu()) {
      cpu = t.device();
    }
  };
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && first + i < stack.size(); ++i) {
    const c10::IValue& value = stack[first + i];
    if (value.isTensor()) {
      visit(value.toTensor());
    } else if (value.isTensorList()) {
      for (const auto& t : value.toTensorVector()) visit(t);
    }
    // Lists of optional tensors are index lists (index, index_put_): CPU indices are accepted.
  }
  TORCH_CHECK(!neuron || !cpu,
              "Expected all tensors to be on the same device, but found at least two devices, ",
              *neuron, " and ", *cpu, "! (when checking arguments for ", name,
              "). Move the ", *cpu, " tensor to neuron with .to('neuron'), or the neuron tensor "
              "to the CPU with .cpu().");
  return neuron;
}

bool is_generator(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  const auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// An omitted generator (None) means the device's default generator, as on CUDA: left as None,
// the CPU kernel would draw from the CPU default generator, and torch.neuron.manual_seed and
// set_rng_state would not govern the op.
void substitute_generators(const c10::FunctionSchema& schema, torch::jit::Stack& stack,
                           size_t first, std::optional<c10::Device> device) {
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && first + i < stack.size(); ++i) {
    if (!is_generator(args[i])) continue;
    c10::IValue& value = stack[first + i];
    std::optional<at::Generator> generator;
    if (value.isGenerator() && value.toGenerator().defined()) {
      generator = value.toGenerator();
      if (generator->device().type() != c10::DeviceType::PrivateUse1) continue;
    }
    // How many values the op draws is unknown here; reserve a generous block so successive
    // calls never overlap for realistic sizes.
    value = c10::IValue(
        host_generator_for(generator, device ? device->index() : -1, uint64_t{1} << 32));
  }
}

void neuron_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name(op);
  const size_t num_args = op.schema().arguments().size();
  const size_t first = stack->size() - num_args;
  const std::optional<c10::Device> device = check_devices(name, op.schema(), *stack, first);
  substitute_generators(op.schema(), *stack, first, device);
  record_fallback(name);
  warn_once(name);
  // View-returning ops cannot be emulated by copying; those need native kernels (Views.cpp).
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_cpu_fallback>());
}

}  // namespace
}  // namespace torch_neuronx
