// Observers of launch records. Registering one is how any part of the system learns what ran;
// when none is registered, publishing a record costs one atomic load.
//
// on_launch runs on the launching thread, inside the stream's order, and must be quick and must
// not launch work itself. Records are passed by reference and valid only during the call.
#pragma once

#include <atomic>
#include <cstdint>

#include "runtime/LaunchRecord.h"

namespace nrtsim {

class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  virtual void on_launch(const LaunchRecord& record) = 0;
};

// Not owned; an observer must be removed before it is destroyed. Removal waits for calls in
// flight, so nothing calls an observer after remove_observer returns.
void add_observer(LaunchObserver* observer);
void remove_observer(LaunchObserver* observer);

namespace detail {
extern std::atomic<int> g_observer_count;
void publish_slow(const LaunchRecord& record);
}  // namespace detail

inline bool has_observers() {
  return detail::g_observer_count.load(std::memory_order_acquire) != 0;
}
inline void publish(const LaunchRecord& record) {
  if (has_observers()) detail::publish_slow(record);
}

// The framework op on whose behalf the calling thread launches work: the profiler sets it as it
// enters each op, and every record launched meanwhile carries it.
uint64_t current_correlation_id();
void set_correlation_id(uint64_t id);
class CorrelationScope {
 public:
  explicit CorrelationScope(uint64_t id) : previous_(current_correlation_id()) {
    set_correlation_id(id);
  }
  ~CorrelationScope() { set_correlation_id(previous_); }
  CorrelationScope(const CorrelationScope&) = delete;
  CorrelationScope& operator=(const CorrelationScope&) = delete;

 private:
  uint64_t previous_;
};

}  // namespace nrtsim
