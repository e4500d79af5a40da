#include "runtime/SimClock.h"

#include <algorithm>

namespace nrtsim {

std::array<double, kEngineCount> SimClock::busy_ns(const LaunchRecord& record) const {
  if (record.work.has_timeline) return record.work.timeline_busy_ns;
  if (record.kind == LaunchKind::kCollective) {
    // The DMA queues drive the links for the collective's time.
    std::array<double, kEngineCount> busy{};
    busy[index_of(Engine::kDma)] = links_.collective_ns(record.work.collective);
    return busy;
  }
  return model_.busy_ns(record.work, record.kind);
}

void SimClock::schedule(LaunchRecord& record, double& stream_cursor, double host_exclusive_ns) {
  const bool timed = record.work.has_timeline;
  const std::array<double, kEngineCount> busy = busy_ns(record);
  double duration = timed ? model_.fixed_cost_ns(record.kind) + record.work.timeline_ns
                          : model_.duration_ns(busy, record.kind);
  if (record.kind == LaunchKind::kHostFallback) duration += host_exclusive_ns;
  const double fixed = model_.fixed_cost_ns(record.kind);

  std::lock_guard<SpinLock> lock(mutex_);
  double begin = stream_cursor;
  for (size_t e = 0; e < kEngineCount; ++e) {
    if (busy[e] > 0) begin = std::max(begin, free_at_ns_[e]);
  }
  for (size_t e = 0; e < kEngineCount; ++e) {
    if (busy[e] > 0) {
      free_at_ns_[e] = begin + fixed + busy[e];
      busy_total_ns_[e] += busy[e];
    }
  }
  record.sim_begin_ns = begin;
  record.sim_end_ns = begin + duration;
  record.engine_busy_ns = busy;
  stream_cursor = record.sim_end_ns;
  now_ns_ = std::max(now_ns_, record.sim_end_ns);
}

double SimClock::now_ns() const {
  std::lock_guard<SpinLock> lock(mutex_);
  return now_ns_;
}

std::array<double, kEngineCount> SimClock::busy_totals_ns() const {
  std::lock_guard<SpinLock> lock(mutex_);
  return busy_total_ns_;
}

}  // namespace nrtsim
