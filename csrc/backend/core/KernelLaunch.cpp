#include "backend/core/KernelLaunch.h"

#include "backend/core/NeuronStream.h"

namespace torch_neuronx {

nrtsim::Stream& current_runtime_stream(c10::DeviceIndex device) {
  return current_stream_object(device);
}

}  // namespace torch_neuronx
