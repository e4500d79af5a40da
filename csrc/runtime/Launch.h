// The one way work touches a NeuronCore's memory. A launch runs its body on a stream, in the
// stream's order, and yields one launch record: what it was (op, kind), where (device, stream),
// the work it asked of each engine, when it ran on the host and when it ran on the simulated
// Trainium clock. The record goes to the observers (LaunchObserver.h).
#pragma once

#include <chrono>
#include <cstdint>

#include "runtime/LaunchObserver.h"
#include "runtime/LaunchRecord.h"
#include "runtime/NeuronCore.h"
#include "runtime/Stream.h"

namespace nrtsim {

inline int64_t host_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace detail {
// Host time spent in launches nested inside the one running on this thread: a CPU fallback's own
// copies are records of their own, so the fallback's record charges only the rest.
inline thread_local int64_t t_nested_host_ns = 0;
// Whether a launch is running on this thread: only a nested launch has an outer one to report
// its host time to, so only it reads the clock again as it ends.
inline thread_local bool t_in_launch = false;
}  // namespace detail

// Runs `body` on `stream` as the launch `op` of `kind`. `work` is read after the body has run, so
// a body may add what it only then knows (the size of a fresh result). A body that throws yields
// no record.
template <class Body>
void launch(Stream& stream, const char* op, LaunchKind kind, const Work& work, Body&& body) {
  stream.submit([&] {
    const int64_t outer_nested = detail::t_nested_host_ns;
    detail::t_nested_host_ns = 0;
    const int64_t begin = host_now_ns();
    struct Restore {
      bool nested;
      int64_t outer;
      int64_t begin;
      ~Restore() {
        detail::t_in_launch = nested;
        if (nested) detail::t_nested_host_ns = outer + (host_now_ns() - begin);
      }
    } restore{detail::t_in_launch, outer_nested, begin};
    detail::t_in_launch = true;
    body();
    LaunchRecord record;
    record.host_begin_ns = begin;
    record.host_end_ns = host_now_ns();
    record.op = op;
    record.kind = kind;
    record.device = stream.device_index();
    record.stream = stream.id();
    record.work = work;
    record.correlation_id = current_correlation_id();
    const double exclusive =
        static_cast<double>(record.host_end_ns - record.host_begin_ns - detail::t_nested_host_ns);
    stream.core().clock().schedule(record, stream.sim_cursor_ns(), exclusive);
    publish(record);
  });
}

}  // namespace nrtsim
