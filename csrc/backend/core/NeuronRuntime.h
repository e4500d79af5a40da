// The backend's door to nrtsim: one place that turns runtime errors into PyTorch errors, and the
// thread's current device.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <utility>

#include "runtime/Error.h"
#include "runtime/Runtime.h"

namespace torch_neuronx {

// Rethrows an nrtsim error as the PyTorch error a user expects: torch.OutOfMemoryError for HBM
// exhaustion, RuntimeError otherwise.
[[noreturn]] void rethrow_runtime_error(const nrtsim::Error& error);

// Calls `fn`, translating nrtsim errors.
template <class Fn>
decltype(auto) runtime_call(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const nrtsim::Error& error) {
    rethrow_runtime_error(error);
  }
}

// The runtime, initialised on first use.
nrtsim::Runtime& runtime();
// The logical core behind neuron:<index>; validates the index.
nrtsim::NeuronCore& core(c10::DeviceIndex index);

// Visible devices, without initialising the runtime; 0 when the environment is invalid.
c10::DeviceIndex device_count() noexcept;

// The calling thread's current device (0 until set_device).
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);  // validates, initialises the runtime
// Sets without validation (for noexcept guard paths); index must already be known good.
void set_device_unchecked(c10::DeviceIndex index) noexcept;
// Makes `index` (already validated) the current device for a scope: the cheap guard for kernels,
// which run with their tensors' device current so that allocations land there.
class CurrentDeviceScope {
 public:
  explicit CurrentDeviceScope(c10::DeviceIndex index) : previous_(current_device()) {
    if (index != previous_) set_device_unchecked(index);
  }
  ~CurrentDeviceScope() { set_device_unchecked(previous_); }
  CurrentDeviceScope(const CurrentDeviceScope&) = delete;
  CurrentDeviceScope& operator=(const CurrentDeviceScope&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// Throws a clear error if `index` is outside the visible devices.
void check_device_index(c10::DeviceIndex index);

}  // namespace torch_neuronx
