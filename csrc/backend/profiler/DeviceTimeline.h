// Where a launch record lands on the profiler's time line.
//
// A record carries two clocks: the host's (when the simulator executed it) and the device's
// simulated Trainium clock (when a NeuronCore would have run it). The profiler shows device
// events on the simulated clock, shifted by one offset per device onto the host time base the CPU
// events use, so that both sit in one trace:
//  - the offset starts where the first launch of the device was issued by the host;
//  - it only grows, and only when a launch would otherwise start before the host issued it: a
//    real device cannot run work it has not been given, so it waits for the host. The simulator
//    is host-synchronous and usually slower than the modelled device, so in practice each device
//    event starts where its launch began on the host, unless the device is still busy.
// Durations, and the order and overlap of events between two raises of the offset, are exactly
// the simulated ones. The offset being one integer per device and only growing, events that do
// not overlap in simulated time (one stream, one engine) never overlap here either.
#pragma once

#include <cstdint>
#include <unordered_map>

namespace torch_neuronx::profiler {

struct TimelineSpan {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

class DeviceTimeline {
 public:
  // `host_issue_ns` is on the profiler's time base. Not thread-safe: the caller serialises.
  TimelineSpan place(int device, double sim_begin_ns, double sim_end_ns, int64_t host_issue_ns);

 private:
  std::unordered_map<int, int64_t> offset_ns_;  // profiler time minus simulated time, per device
};

}  // namespace torch_neuronx::profiler
