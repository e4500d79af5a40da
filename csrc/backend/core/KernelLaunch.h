// The backend's one kernel builder. A kernel names its op, the device it runs on and its engine,
// states what it touches (Cost.h derives bytes and number format from the tensors) and the
// arithmetic it does (FlopModels.h), or takes both from the op-work table (OpWork.h), then runs its body: one launch on the current stream of the
// device, with the device current and the body's fresh CPU allocations placed in that device's
// HBM, yielding one launch record.
//
//   Kernel kernel("aten::mm", self.device(), Engine::kTensor);
//   kernel.reads(self).reads(mat2).ops(flops::matmul(self, mat2));
//   at::Tensor out;
//   kernel.run([&] { out = kernel.result(at::mm(host_view(self), host_view(mat2))); });
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <utility>

#include "backend/core/Cost.h"
#include "backend/core/HostView.h"
#include "backend/core/NeuronRuntime.h"
#include "backend/core/NeuronStream.h"
#include "runtime/Launch.h"

namespace torch_neuronx {

using nrtsim::LaunchKind;

// Runs `body` as one launch of `op` on the current stream of `device`, with `device` current.
template <class Body>
void launch_on(c10::DeviceIndex device, const char* op, LaunchKind kind, const nrtsim::Work& work,
               Body&& body) {
  nrtsim::Stream& stream = current_stream_object(device);
  const CurrentDeviceScope scope(device);
  runtime_call([&] { nrtsim::launch(stream, op, kind, work, std::forward<Body>(body)); });
}

class Kernel {
 public:
  // A device without an index means the current neuron device.
  Kernel(const char* op, c10::Device device, Engine engine, LaunchKind kind = LaunchKind::kKernel)
      : op_(op),
        device_(device.has_index() ? device
                                   : c10::Device(c10::DeviceType::PrivateUse1, current_device())),
        kind_(kind),
        cost_(engine) {}
  // A kernel whose reads and arithmetic a rule of the op-work table built (OpWork.h work::).
  Kernel(const char* op, c10::Device device, Cost cost, LaunchKind kind = LaunchKind::kKernel)
      : op_(op),
        device_(device.has_index() ? device
                                   : c10::Device(c10::DeviceType::PrivateUse1, current_device())),
        kind_(kind),
        cost_(std::move(cost)) {}

  Kernel& reads(const at::Tensor& t) {
    cost_.reads(t);
    return *this;
  }
  Kernel& reads(const std::optional<at::Tensor>& t) {
    if (t.has_value()) cost_.reads(*t);
    return *this;
  }
  Kernel& reads(at::TensorList ts) {
    cost_.reads(ts);
    return *this;
  }
  Kernel& writes(const at::Tensor& t) {
    cost_.writes(t);
    return *this;
  }
  Kernel& writes(at::TensorList ts) {
    cost_.writes(ts);
    return *this;
  }
  Kernel& ops(uint64_t n) {
    cost_.ops(n);
    return *this;
  }
  Kernel& ops(Engine engine, uint64_t n) {
    cost_.ops(engine, n);
    return *this;
  }

  // Inside run(): a fresh result of the CPU code as a tensor of this kernel's device (allocated
  // in its HBM already, so usually without a copy), counted as written.
  at::Tensor result(const at::Tensor& host_result) {
    at::Tensor moved = move_to_hbm(host_result, device_);
    cost_.writes(moved);
    return moved;
  }

  template <class Body>
  void run(Body&& body) {
    launch_on(device_.index(), op_, kind_, cost_.work(), [&] {
      const HostAllocationsInHbm results_in_hbm(device_.index());
      body();
    });
  }

  c10::Device device() const { return device_; }
  Cost& cost() { return cost_; }

 private:
  const char* op_;
  c10::Device device_;
  LaunchKind kind_;
  Cost cost_;
};

}  // namespace torch_neuronx
