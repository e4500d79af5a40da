#include "backend/profiler/DeviceTimeline.h"

#include <algorithm>
#include <cmath>

namespace torch_neuronx::profiler {

TimelineSpan DeviceTimeline::place(int device, double sim_begin_ns, double sim_end_ns,
                                   int64_t host_issue_ns) {
  // Both ends are rounded to whole nanoseconds (the profiler's unit) before the offset is added:
  // rounding is monotone, so one stream's or one engine's events stay in order and apart.
  const int64_t begin = std::llround(sim_begin_ns);
  const int64_t end = std::llround(sim_end_ns);
  const int64_t needed = host_issue_ns - begin;  // the offset at which this launch starts on issue
  auto [it, first] = offset_ns_.try_emplace(device, needed);
  if (!first) it->second = std::max(it->second, needed);
  return {it->second + begin, it->second + end};
}

}  // namespace torch_neuronx::profiler
