// Argument rewrites shared by the boxed kernels (host-math kernels, CPU fallback); the device
// checks are in DeviceCheck.h.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include <optional>
#include <string>

namespace torch_neuronx {

// "aten::name.overload".
std::string op_name(const c10::OperatorName& name);

// Replaces neuron generators, and omitted ones (the device's default generator, as on CUDA), by
// CPU generators drawing from the neuron stream, so seeding governs ops computed on the host.
void substitute_generators(const c10::FunctionSchema& schema, torch::jit::Stack& stack,
                           size_t first, std::optional<c10::Device> device);

}  // namespace torch_neuronx
