// Argument checks and rewrites shared by the boxed kernels (host-math kernels, CPU fallback).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include <optional>
#include <string>

namespace torch_neuronx {

// "aten::name.overload".
std::string op_name(const c10::OperatorName& name);

// The error for tensors of one op on two devices, `a` (where the op runs) and `b`; it says how
// to fix a neuron/CPU mix.
[[noreturn]] void fail_two_devices(const std::string& name, c10::Device a, c10::Device b);

// Enforces one device per op: all neuron tensors on one neuron device, and no CPU tensor beside
// them except those CUDA accepts too (0-dim values anywhere, index tensors in an index list).
// Returns the neuron device the op runs on, if any of its tensors is on neuron.
std::optional<c10::Device> check_devices(const std::string& name, const c10::FunctionSchema& schema,
                                         const torch::jit::Stack& stack, size_t first);

// Replaces neuron generators, and omitted ones (the device's default generator, as on CUDA), by
// CPU generators drawing from the neuron stream, so seeding governs ops computed on the host.
void substitute_generators(const c10::FunctionSchema& schema, torch::jit::Stack& stack,
                           size_t first, std::optional<c10::Device> device);

}  // namespace torch_neuronx
