// DeviceGuardImplInterface for neuron: what torch.Stream, torch.Event, torch.accelerator,
// DeviceGuard and the autograd engine use to reach the device.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "backend/core/NeuronRuntime.h"
#include "backend/core/NeuronStream.h"
#include "runtime/Event.h"

namespace torch_neuronx {
namespace {

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kType);
    const c10::Device previous = getDevice();
    if (device.index() != previous.index()) set_device(device.index());
    return previous;
  }

  c10::Device getDevice() const override { return c10::Device(kType, current_device()); }

  // An index-less device (the current one) stays -1; the alias becomes 0.
  static c10::DeviceIndex resolved(c10::Device device) {
    return device.index() < 0 ? device.index() : resolve_device_index(device.index());
  }

  void setDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kType);
    set_device(device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    set_device_unchecked(resolve_device_index_unchecked(device.index()));
  }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  // Streams of the single core's alias (see resolve_device_index) are neuron:0's.
  c10::Stream getStream(c10::Device device) const override {
    return current_stream(resolved(device));
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return default_stream(resolved(device));
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return new_stream(resolved(device), priority);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool is_high_priority) const override {
    return new_stream(resolved(device), is_high_priority ? -1 : 0);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    const c10::Stream previous = getStream(stream.device());
    set_current_stream(stream);
    return previous;
  }

  bool queryStream(const c10::Stream& stream) const override {
    return runtime_stream(stream).query();
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    runtime_stream(stream).synchronize();
  }

  // What torch.accelerator.get_device_capability() reports: the dtypes neuron tensors can be
  // allocated in and converted between. That is every dtype (nrtsim's HBM is host memory) except
  // the quantized ones, which would need a QuantizedPrivateUse1 backend.
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    resolve_device_index(device.index());
    c10::DeviceCapability capability;  // all dtypes
    auto& types = capability.capability_data.supported_scalar_types;
    types.has_QInt8 = types.has_QUInt8 = types.has_QInt32 = 0;
    types.has_QUInt4x2 = types.has_QUInt2x4 = 0;
    return capability;
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    core(resolve_device_index(device_index)).synchronize();
  }

  // Events are nrtsim::Event objects created on first record.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 ||
                    resolve_device_index_unchecked(device_index) == stream.device_index(),
                "event was created on neuron:", static_cast<int>(device_index),
                " but is recorded on a stream of neuron:", static_cast<int>(stream.device_index()));
    auto* runtime_event = static_cast<nrtsim::Event*>(*event);
    if (runtime_event == nullptr) {
      runtime_event = new nrtsim::Event(flag == c10::EventFlag::BACKEND_DEFAULT);
      *event = runtime_event;
    }
    runtime_event->record(runtime_stream(stream));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    // The stream's later work is ordered after the event: with host-synchronous execution that
    // means waiting until the event's stream has reached it.
    // On the simulated clock, the stream's later launches start no earlier than the event.
    auto* runtime_event = static_cast<nrtsim::Event*>(event);
    nrtsim::Stream& waiting = runtime_stream(stream);
    runtime_event->synchronize();
    runtime_event->block(waiting);
  }

  bool queryEvent(void* event) const override {
    return event == nullptr || static_cast<nrtsim::Event*>(event)->query();
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) static_cast<nrtsim::Event*>(event)->synchronize();
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<nrtsim::Event*>(event);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "elapsed_time: both events must be recorded before measuring time between them");
    return runtime_call([&] {
      return static_cast<nrtsim::Event*>(start)->elapsed_ms(*static_cast<nrtsim::Event*>(end));
    });
  }

  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {
    // Work on every stream has finished when its submission returns, so memory used by another
    // stream can be reused at once: nothing to remember.
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace
}  // namespace torch_neuronx
