#include "backend/core/DeviceCheck.h"

#include <c10/util/Exception.h>

namespace torch_neuronx {

void fail_two_devices(const std::string& name, c10::Device a, c10::Device b) {
  const std::string fix =
      b.type() == c10::DeviceType::PrivateUse1
          ? ""
          : ". Move the " + b.str() + " tensor to neuron with .to('neuron'), or the neuron tensor "
            "to the CPU with .cpu().";
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
              a, " and ", b, "! (when checking arguments for ", name, ")", fix);
}

std::optional<c10::Device> check_devices(const std::string& name, const c10::FunctionSchema& schema,
                   const torch::jit::Stack& stack, size_t first) {
  std::optional<c10::Device> neuron;
  std::optional<c10::Device> cpu;
  // A 0-dim CPU tensor is a value the op reads, accepted anywhere as CUDA accepts it; one the op
  // writes (out=, an in-place self) would be written by the device's kernel, and is refused as
  // CUDA refuses it (nonzero, cumsum, masked_select once filled such a tensor from host math).
  auto visit = [&](const at::Tensor& t, bool written) {
    if (!t.defined()) return;
    if (t.device().type() == c10::DeviceType::PrivateUse1) {
      if (neuron && *neuron != t.device()) fail_two_devices(name, *neuron, t.device());
      neuron = t.device();
    } else if (t.dim() > 0 || written || !t.device().is_cpu()) {
      cpu = t.device();
    }
  };
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && first + i < stack.size(); ++i) {
    const c10::IValue& value = stack[first + i];
    if (value.isTensor() && args[i].name() == "scalars" && value.toTensor().device().is_cpu() &&
        schema.name().rfind("aten::_foreach_", 0) == 0) {
      continue;  // a foreach op's scalar list as a tensor: on the host, as CUDA requires it too
    }
    const bool written = args[i].alias_info() != nullptr && args[i].alias_info()->isWrite();
    if (value.isTensor()) {
      visit(value.toTensor(), written);
    } else if (value.isTensorList()) {
      for (const auto& t : value.toTensorVector()) visit(t, written);
    }
    // Lists of optional tensors are index lists (index, index_put_): CPU indices are accepted.
  }
  if (neuron && cpu) fail_two_devices(name, *neuron, *cpu);
  return neuron;
}

void check_input_devices(const char* op, c10::Device device,
                         std::initializer_list<const at::Tensor*> inputs) {
  for (const at::Tensor* t : inputs) {
    if (!t->defined() || t->device() == device) continue;
    if (!t->device().is_cpu() || t->dim() != 0) fail_two_devices(op, device, t->device());
  }
}

void check_out_devices(const char* op, const at::Tensor& out,
                       std::initializer_list<const at::Tensor*> inputs) {
  if (!is_neuron(out)) {
    // The op reached neuron through a neuron input: the output is on another device (a 0-dim
    // CPU tensor is a value to read, never a place to write).
    for (const at::Tensor* t : inputs) {
      if (is_neuron(*t)) fail_two_devices(op, t->device(), out.device());
    }
    TORCH_CHECK(false, op, ": expected the output on neuron, got ", out.device());
  }
  check_input_devices(op, out.device(), inputs);
}

}  // namespace torch_neuronx
