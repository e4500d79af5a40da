// One Kineto profiling session on neuron: while it records, it observes launch records
// (runtime/LaunchObserver.h) and keeps each as a device event; when Kineto collects the trace it
// turns them into activities:
//  - one device activity per record, on the simulated clock (DeviceTimeline.h), in process
//    "neuron:<index>" (pid = device index), on the track of the record's main engine (tid =
//    stream * 8 + engine, so that only launches that one engine runs in order share a track),
//    named after what ran there ("aten::mm [tensor]", "Memcpy HtoD (aten::_copy_from)"), not
//    after the CPU op, so that key_averages() has one row per op with its CPU and device time
//    and one per device kernel, with the record's work, bytes, engine, kind, stream and host
//    duration as arguments, and linked to the CPU op whose correlation id the record carries;
//  - one host-side runtime activity per record ("nrtsim::<kind>", on the launching thread, when
//    PRIVATEUSE1_RUNTIME is requested), the start of the arrow to the device event;
//  - for a launch that occupies several engines at once (an NKI kernel, from its instruction
//    timeline; a compiled program, from the clock's model), one span per engine it used, on that
//    engine's track, named "<op> (<engine> engine)", with the engine's busy time and utilisation.
//    These are GPU user annotations linked to no CPU op, so PyTorch counts the launch's device
//    time once, from its one device activity;
//  - per record_function range (an optimizer step is one) and track ("GPU user annotation", when
//    requested), one span per gap-free run of the device events launched inside the range: its
//    device time in key_averages() is its launches' device time, never the host's wall time.
// Kineto passes the correlation id of each CPU op it enters through push/popCorrelationId on the
// op's thread; the session makes it the runtime's current correlation id there, which is how
// records carry it.
#pragma once

#ifdef USE_KINETO

#include <libkineto.h>
#include <IActivityProfiler.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backend/profiler/DeviceTimeline.h"
#include "runtime/LaunchObserver.h"

namespace torch_neuronx::profiler {

// What the session keeps of one record (records live only during on_launch).
struct DeviceEvent {
  const char* op = "";
  nrtsim::LaunchKind kind = nrtsim::LaunchKind::kKernel;
  int device = -1;
  uint32_t stream = 0;
  nrtsim::Engine engine = nrtsim::Engine::kDma;
  nrtsim::Work work;
  std::array<double, nrtsim::kEngineCount> engine_busy_ns{};
  uint64_t correlation_id = 0;
  uint64_t user_correlation_id = 0;  // the innermost record_function range, 0 if none
  int32_t host_thread = 0;           // Kineto's system thread id of the launching thread
  int64_t host_begin_ns = 0;         // profiler time base
  int64_t host_end_ns = 0;
  double sim_begin_ns = 0;           // the device's simulated clock, as recorded
  double sim_end_ns = 0;
  TimelineSpan placed;               // on the profiler's time base
  uint32_t flow_id = 0;
};

class NeuronProfilerSession final : public libkineto::IActivityProfilerSession,
                                    private nrtsim::LaunchObserver {
 public:
  explicit NeuronProfilerSession(const std::set<libkineto::ActivityType>& activity_types);
  ~NeuronProfilerSession() override;

  void start() override;
  void stop() override;
  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override;
  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback get_linked_activity,
                    int64_t start_time, int64_t end_time) override;

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override;
  std::vector<libkineto::ResourceInfo> getResourceInfos() override;
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override;

  void pushCorrelationId(uint64_t id) override;
  void popCorrelationId() override;
  void pushUserCorrelationId(uint64_t id) override;
  void popUserCorrelationId() override;

 private:
  void on_launch(const nrtsim::LaunchRecord& record) override;
  void observe(bool on);
  libkineto::GenericTraceActivity& add_activity(libkineto::ActivityType type,
                                                const std::string& name);
  void add_device_activity(const DeviceEvent& event,
                           const libkineto::getLinkedActivityCallback& linked,
                           libkineto::ActivityLogger& logger);
  void add_engine_spans(const DeviceEvent& event, libkineto::ActivityLogger& logger);
  void add_runtime_activity(const DeviceEvent& event,
                            const libkineto::getLinkedActivityCallback& linked,
                            libkineto::ActivityLogger& logger);
  void add_user_annotations(const libkineto::getLinkedActivityCallback& linked,
                            libkineto::ActivityLogger& logger);
  libkineto::DeviceInfo device_info(int device) const;
  std::set<int> devices_used() const;  // caller holds mutex_

  const bool device_events_;      // CONCURRENT_KERNEL / GPU_MEMCPY requested
  const bool runtime_events_;     // PRIVATEUSE1_RUNTIME requested
  const bool user_annotations_;   // GPU_USER_ANNOTATION requested
  const uint64_t generation_;     // tells this session's thread-local correlation stacks apart

  std::mutex mutex_;              // guards the fields below while recording
  bool observing_ = false;
  int64_t steady_to_profiler_ns_ = 0;  // profiler time (Unix ns) minus steady-clock time
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  DeviceTimeline timeline_;
  std::vector<DeviceEvent> events_;

  // Filled by processTrace, handed to Kineto (which keeps activities alive with it) by
  // getTraceBuffer. Held by pointer so activities' pointer to its span stays valid.
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

}  // namespace torch_neuronx::profiler

#endif  // USE_KINETO
