#include "backend/core/NeuronRuntime.h"

#include <c10/util/Exception.h>

#include <string>

namespace torch_neuronx {

namespace {
thread_local c10::DeviceIndex t_current_device = 0;
}

[[noreturn]] void rethrow_runtime_error(const nrtsim::Error& error) {
  switch (error.code()) {
    case nrtsim::ErrorCode::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, error.what());
    default:
      // RuntimeError for everything else, as CUDA does for bad ordinals and bad arguments.
      TORCH_CHECK(false, error.what());
  }
}

nrtsim::Runtime& runtime() {
  return runtime_call([]() -> nrtsim::Runtime& { return nrtsim::Runtime::get(); });
}

nrtsim::NeuronCore& core(c10::DeviceIndex index) {
  return runtime_call([&]() -> nrtsim::NeuronCore& { return nrtsim::Runtime::get().core(index); });
}

c10::DeviceIndex device_count() noexcept {
  return static_cast<c10::DeviceIndex>(nrtsim::Runtime::visible_device_count());
}

c10::DeviceIndex current_device() { return t_current_device; }

void check_device_index(c10::DeviceIndex index) {
  const int count = device_count();
  if (count == 0) {
    const std::string why = nrtsim::Runtime::configuration_error();
    TORCH_CHECK(false, "no neuron device is available",
                why.empty() ? std::string() : ": " + why);
  }
  // The same words as torch.neuron's ValueError and nrtsim's Topology::core: TorchNeuron's
  // sentence, then which devices exist and what sets them.
  TORCH_CHECK(index >= 0 && index < count, "Device index ", static_cast<int>(index),
              " is out of range. Valid range is 0 to ", count - 1, " for this process: neuron:",
              static_cast<int>(index), " does not exist among its ", count,
              " NeuronCore device(s) (neuron:0",
              count > 1 ? "-neuron:" + std::to_string(count - 1) : std::string(),
              "), set by NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES");
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  runtime();
  t_current_device = index;
}

void set_device_unchecked(c10::DeviceIndex index) noexcept { t_current_device = index; }

}  // namespace torch_neuronx
