#include "backend/core/NeuronStream.h"

#include <c10/util/Exception.h>

#include "backend/core/NeuronRuntime.h"

namespace torch_neuronx {

namespace {
// Zero-initialised: every device starts on its default stream.
thread_local uint32_t t_current_stream[nrtsim::kMaxDevicesPerProcess + 1] = {};

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
  return wrap(device, t_current_stream[device]);
}

void set_current_stream(const c10::Stream& stream) {
  runtime_stream(stream);  // validates device and id
  t_current_stream[stream.device_index()] = static_cast<uint32_t>(stream.id());
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
    return nrtsim::Runtime::get()
        .core(stream.device_index())
        .stream(static_cast<uint32_t>(stream.id()));
  });
}

}  // namespace torch_neuronx
