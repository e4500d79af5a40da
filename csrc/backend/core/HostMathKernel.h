// Native neuron kernels computed with ATen's CPU math on the device buffers.
//
// nrtsim's HBM is host memory, so the fastest correct kernel for most ops is the CPU kernel run in
// place: its tensor arguments are swapped for host views (HostView.h) of the neuron buffers and
// the op is redispatched to the CPU key, inside one launch on the op's device. Unlike the CPU
// fallback nothing is copied in or out; a write argument (out=, in-place self) that the CPU kernel
// resizes gets its new storage from HBM. A fresh tensor the CPU kernel returns (functional ops) is
// moved into HBM with one copy, keeping the strides the CPU kernel chose.
//
// Each op family (ops/*.cpp) registers its ops with the engine they occupy on a NeuronCore and a
// FLOP count, which the launch records in the execution trace.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"
#include "runtime/KernelLaunch.h"

namespace torch_neuronx {

// The op's arguments as the kernel sees them (host views in place of neuron tensors).
using KernelArgs = c10::ArrayRef<c10::IValue>;
using FlopCount = uint64_t (*)(const c10::FunctionSchema& schema, KernelArgs args);

// Common FLOP models.
uint64_t flops_none(const c10::FunctionSchema&, KernelArgs);
uint64_t flops_per_element(const c10::FunctionSchema&, KernelArgs);  // largest tensor's numel
uint64_t flops_matmul(const c10::FunctionSchema&, KernelArgs);       // 2 * M * N * K (* batch)

struct OpFamily {
  const char* family;               // for messages: "elementwise", "reduction", ...
  nrtsim::Engine engine;
  FlopCount flops;
  // Also take ops whose CPU implementation is a CompositeExplicitAutograd kernel (the foreach
  // ops: on the host their per-tensor loop then runs without per-tensor neuron dispatch).
  bool composite_explicit_cpu = false;
};

// Registers every overload of each base name (e.g. "add" -> add.out, add_.Tensor, ...) that has a
// CPU kernel, except overloads PyTorch already maps onto another neuron kernel (composites, and
// the in-place forms of structured ops, which call their .out overload on neuron).
void register_host_math_ops(torch::Library& library, const OpFamily& family,
                            std::initializer_list<const char*> base_names);

// Registers exactly these overloads ("name.overload" or "name"), for ops whose other overloads
// need a dedicated kernel.
void register_host_math_overloads(torch::Library& library, const OpFamily& family,
                                  std::initializer_list<const char*> overloads);

// The unboxed form, for the hottest out= ops (arithmetic, sum): the same host-math execution
// without the boxed argument stack, which dominates the cost of an op on a small tensor.
// `compute(out_view, input_views...)` runs the CPU kernel; `out` may be resized by it.
void check_out_devices(const char* op, const at::Tensor& out,
                       std::initializer_list<const at::Tensor*> inputs);
// Inputs must be on `device`, except 0-dim CPU values (as on CUDA).
void check_input_devices(const char* op, c10::Device device,
                         std::initializer_list<const at::Tensor*> inputs);

inline at::Tensor view_of_input(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1 ? host_view(t) : t;
}

template <class Compute, class... Inputs>
at::Tensor& host_math_out(const KernelInfo& info, at::Tensor& out, Compute&& compute,
                          const Inputs&... inputs) {
  check_out_devices(info.op, out, {&inputs...});
  const CurrentDeviceScope scope(out.device().index());
  launch_kernel(out.device().index(), info, [&] {
    at::Tensor out_view = host_view(out, /*resizable=*/true);
    compute(out_view, view_of_input(inputs)...);
    adopt_host_view(out_view, out);
  });
  return out;
}

// The functional form: `compute(input_views...)` returns the CPU kernel's fresh result, which is
// allocated in HBM of `device` and becomes the neuron result without a copy.
template <class Compute, class... Inputs>
at::Tensor host_math(const KernelInfo& info, c10::Device device, Compute&& compute,
                     const Inputs&... inputs) {
  check_input_devices(info.op, device, {&inputs...});
  const CurrentDeviceScope scope(device.index());
  at::Tensor result;
  launch_kernel(device.index(), info, [&] {
    const HostAllocationsInHbm results_in_hbm(device.index());
    result = move_to_hbm(compute(view_of_input(inputs)...), device);
  });
  return result;
}

// Names in the family lists that matched no registrable overload in this torch version (a stale
// list). Empty in a correct build; a test asserts that.
std::vector<std::string>& unregistered_names();

}  // namespace torch_neuronx
