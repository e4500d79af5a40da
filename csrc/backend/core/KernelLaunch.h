// The single kernel-launch path of the backend. A native kernel describes itself (op name, FLOPs,
// bytes moved, engine) and hands its body over; the body runs on the current stream of the
// tensor's device and the launch lands in nrtsim's execution trace, which feeds
// torch_neuronx.get_executed_ops(), the profiler and the cost model.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "backend/core/NeuronRuntime.h"
#include "backend/core/NeuronStream.h"
#include "runtime/KernelLaunch.h"

namespace torch_neuronx {

using nrtsim::Engine;
using nrtsim::KernelInfo;

nrtsim::Stream& current_runtime_stream(c10::DeviceIndex device);

template <class Body>
void launch_kernel(c10::DeviceIndex device, const KernelInfo& info, Body&& body) {
  nrtsim::Stream& stream = current_runtime_stream(device);
  runtime_call([&] { nrtsim::launch(stream, info, std::forward<Body>(body)); });
}

// Bytes a tensor's elements occupy (what a kernel reads or writes of it).
inline uint64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? static_cast<uint64_t>(t.numel()) * t.element_size() : 0;
}

}  // namespace torch_neuronx
