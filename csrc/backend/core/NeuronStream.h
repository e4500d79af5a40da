// c10::Stream <-> nrtsim::Stream. A neuron c10::Stream's id is the runtime stream's id on its
// core (0 is the default stream); each thread has a current stream per device, as in CUDA.
#pragma once

#include <c10/core/Stream.h>

#include "runtime/Stream.h"

namespace torch_neuronx {

c10::Stream default_stream(c10::DeviceIndex device);
c10::Stream current_stream(c10::DeviceIndex device);
void set_current_stream(const c10::Stream& stream);
// A stream from the device's pool; priority < 0 asks for the high-priority pool.
c10::Stream new_stream(c10::DeviceIndex device, int priority);
int stream_priority(const c10::Stream& stream);

nrtsim::Stream& runtime_stream(const c10::Stream& stream);
// The calling thread's current stream of `device` (a valid index, or -1 for the current device):
// the launch path's lookup, without validation.
nrtsim::Stream& current_stream_object(c10::DeviceIndex device);

}  // namespace torch_neuronx
