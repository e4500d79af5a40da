// The marker half of the legacy profiler: torch.autograd.profiler.profile(use_device="neuron")
// without Kineto (its default, use_kineto=False) brackets every op with two device markers and
// reports the device time between them. A marker here is an nrtsim event recorded on the current
// stream of the current device, so the time between two is modelled Trainium time on that stream,
// the same clock as the Kineto device events and Event.elapsed_time.
#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

#include "backend/core/NeuronRuntime.h"
#include "backend/core/NeuronStream.h"
#include "runtime/Event.h"
#include "runtime/Runtime.h"

namespace torch_neuronx::profiler {

namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

class NeuronMarkers final : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    if (device) *device = current_device();
    // Profiling must not be what initialises the runtime: before the first device use there is
    // nothing to time, and a null marker reads as zero device time.
    if (event) {
      if (nrtsim::Runtime::is_initialized()) {
        auto marker = std::make_shared<nrtsim::Event>(/*enable_timing=*/true);
        marker->record(current_stream_object(current_device()));
        *event = marker;
      } else {
        event->reset();
      }
    }
    if (cpu_ns) *cpu_ns = c10::getTime();
  }

  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    if (!start || !*start || !end || !*end) return 0.0f;
    const auto* a = static_cast<const nrtsim::Event*>(start->get());
    const auto* b = static_cast<const nrtsim::Event*>(end->get());
    // Markers of two devices (the current device changed inside the op) share no clock.
    if (a->device_index() != b->device_index()) return 0.0f;
    return static_cast<float>(runtime_call([&] { return a->elapsed_ms(*b); }) * 1000.0);  // us
  }

  // nrtsim has no annotation ranges of its own: record_function ranges reach the trace through
  // Kineto (NeuronProfilerSession's user annotations).
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  void onEachDevice(std::function<void(int)> op) const override {
    if (!nrtsim::Runtime::is_initialized()) return;
    const c10::DeviceIndex previous = current_device();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      set_device(d);
      op(d);
    }
    set_device(previous);
  }

  void synchronize() const override {
    if (nrtsim::Runtime::is_initialized()) runtime_call([] { runtime().synchronize(); });
  }

  bool enabled() const override { return true; }
};

[[maybe_unused]] const bool g_registered = [] {
  static NeuronMarkers markers;
  torch::profiler::impl::registerPrivateUse1Methods(&markers);
  return true;
}();

}  // namespace

}  // namespace torch_neuronx::profiler
