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

// One core per process (torchrun's layout, NEURON_RT_VISIBLE_CORES=$LOCAL_RANK): that core is
// neuron:0, and its number on the instance (the id NEURON_RT_VISIBLE_CORES gave, = LOCAL_RANK) is
// a second name for it, because code written for every core visible names it
// neuron:<LOCAL_RANK> (set_device(local_rank), barrier(device_ids=[local_rank]), c10d's barrier
// tensor, DDP's device_ids). The alias is only a name on the way in: tensors, streams and
// generators are made on neuron:0, so every same-device check holds. -1 when there is none
// (several cores visible, or the one core is core 0).
int single_core_alias() noexcept;
// The device `index` names: itself when this process sees it, 0 for the single core's alias;
// otherwise the error of check_device_index. Where indices enter from outside (the guard, the
// hooks, torch.neuron) they pass through this; inside, indices are the canonical ones.
c10::DeviceIndex resolve_device_index(c10::DeviceIndex index);
// For noexcept paths: the alias mapped to 0, any other index unchanged.
c10::DeviceIndex resolve_device_index_unchecked(c10::DeviceIndex index) noexcept;

}  // namespace torch_neuronx
