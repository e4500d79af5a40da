#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {

nrtsim::Stream& current_runtime_stream(c10::DeviceIndex device) {
  return runtime_stream(current_stream(device));
}

}  // namespace torch_neuronx
