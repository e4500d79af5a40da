#include "backend/core/NeuronStream.h"

#include <c10/util/Exception.h>

#include "backend/core/NeuronRuntime.h"

namespace torch_neuronx {

namespace {
// The thread's current stream per device; null until first use, which means the default stream.
// Kernels look their stream up here once per launch: one array read, no validation (their
// tensors' device is valid), no runtime lookup.
thread_local nrtsim::Stream* t_current_stream[nrtsim::kMaxDevicesPerProcess + 1] = {};

c10::Stream wrap(c10::DeviceIndex device, uint32_t id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device),
                     static_cast<c10::StreamId>(id));
}
}  // namespace

c10::Stream default_stream(c10::DeviceIndex device) {
  check_device_index(device);
  return wrap(device, nrtsim::NeuronCore::kDefaultStreamId);
}

c10::Stream current_stream(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return wrap(device, current_stream_object(device).id());
}

nrtsim::Stream& current_stream_object(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  // A child forked after initialisation must not use the parent's runtime: runtime() raises the
  // error that names 'spawn' (one atomic load on this path).
  if (nrtsim::Runtime::in_forked_child()) runtime();
  nrtsim::Stream* stream = t_current_stream[device];
  if (stream == nullptr) {
    stream = &core(device).default_stream();
    t_current_stream[device] = stream;
  }
  return *stream;
}

void set_current_stream(const c10::Stream& stream) {
  t_current_stream[stream.device_index()] = &runtime_stream(stream);  // validates device and id
}

c10::Stream new_stream(c10::DeviceIndex device, int priority) {
  if (device < 0) device = current_device();
  return wrap(device, core(device).pool_stream(priority).id());
}

int stream_priority(const c10::Stream& stream) { return runtime_stream(stream).priority(); }

nrtsim::Stream& runtime_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "expected a neuron stream, got a stream on ", stream.device());
  TORCH_CHECK(stream.id() >= 0, "invalid neuron stream id ", stream.id());
  return runtime_call([&]() -> nrtsim::Stream& {
    return core(stream.device_index()).stream(static_cast<uint32_t>(stream.id()));
  });
}

}  // namespace torch_neuronx
