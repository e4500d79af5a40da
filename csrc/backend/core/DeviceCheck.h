// The one device-check rule of every neuron kernel, boxed or unboxed, native or fallback: all
// neuron tensors of an op on one neuron device, and no CPU tensor beside them except those CUDA
// accepts too (0-dim values the op only reads, index tensors in an index list, a foreach op's
// scalars).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include <initializer_list>
#include <optional>
#include <string>

namespace torch_neuronx {

inline bool is_neuron(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// The error for tensors of one op on two devices, `a` (where the op runs) and `b`; it says how
// to fix a neuron/CPU mix.
[[noreturn]] void fail_two_devices(const std::string& name, c10::Device a, c10::Device b);

// Boxed form: checks the op's tensor arguments on the stack; returns the neuron device the op runs
// on, if any of its tensors is on neuron.
std::optional<c10::Device> check_devices(const std::string& name, const c10::FunctionSchema& schema,
                                         const torch::jit::Stack& stack, size_t first);

// Unboxed forms: inputs must be on `device`, except 0-dim CPU values.
void check_input_devices(const char* op, c10::Device device,
                         std::initializer_list<const at::Tensor*> inputs);
// `out` must be a neuron tensor, and the inputs on its device.
void check_out_devices(const char* op, const at::Tensor& out,
                       std::initializer_list<const at::Tensor*> inputs);

}  // namespace torch_neuronx
