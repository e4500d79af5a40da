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
  if (index >= 0 && index < count) return;
  const int alias = single_core_alias();
  TORCH_CHECK(false, "Device index ", static_cast<int>(index),
              " is out of range. Valid range is 0 to ", count - 1, " for this process: neuron:",
              static_cast<int>(index), " does not exist among its ", count,
              " NeuronCore device(s) (neuron:0",
              count > 1 ? "-neuron:" + std::to_string(count - 1) : std::string(),
              "), set by NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES",
              alias >= 0 && alias != index
                  ? "; its one core is also neuron:" + std::to_string(alias) +
                        ", its number on the instance (NEURON_RT_VISIBLE_CORES=" +
                        std::to_string(alias) + ")"
                  : std::string());
}

namespace {
int alias_of(const nrtsim::Topology& topology) {
  if (topology.device_count() != 1) return -1;
  const int id = topology.cores().front().logical_id;
  return id == 0 ? -1 : id;
}
}  // namespace

int single_core_alias() noexcept {
  try {
    if (nrtsim::Runtime::is_initialized()) {
      // The topology is fixed once the runtime has started: read it once.
      static const int alias = alias_of(nrtsim::Runtime::get().topology());
      return alias;
    }
    // Before that the environment may still change (torch_neuronx sets NEURON_RT_VISIBLE_CORES
    // under torchrun at import), as device_count() reads it afresh.
    return alias_of(nrtsim::Topology::build(nrtsim::TopologyConfig::from_environment()));
  } catch (...) {
    return -1;  // a bad environment or a forked child: no alias; the callers' checks say why
  }
}

c10::DeviceIndex resolve_device_index(c10::DeviceIndex index) {
  if (index >= 0 && index < device_count()) return index;
  if (index >= 0 && index == single_core_alias()) return 0;
  check_device_index(index);  // throws, naming the devices that exist
  return index;
}

c10::DeviceIndex resolve_device_index_unchecked(c10::DeviceIndex index) noexcept {
  if (index > 0 && index >= device_count() && index == single_core_alias()) return 0;
  return index;
}

void set_device(c10::DeviceIndex index) {
  const c10::DeviceIndex resolved = resolve_device_index(index);
  runtime();
  t_current_device = resolved;
}

void set_device_unchecked(c10::DeviceIndex index) noexcept { t_current_device = index; }

}  // namespace torch_neuronx
