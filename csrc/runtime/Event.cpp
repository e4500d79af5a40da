#include "runtime/Event.h"

#include "runtime/Error.h"
#include "runtime/Launch.h"
#include "runtime/Stream.h"

namespace nrtsim {

void Event::record(Stream& stream) {
  // The marker goes through the queue like any work, so it is stamped when the stream gets there.
  stream.submit([&] {
    stream_ = &stream;
    ticket_ = stream.submitted();
    sim_time_ns_ = stream.sim_cursor_ns();
    if (timing_) host_time_ns_ = host_now_ns();
  });
}

bool Event::query() const { return stream_ == nullptr || stream_->reached(ticket_); }

void Event::synchronize() const {
  if (stream_ != nullptr && !stream_->reached(ticket_)) stream_->synchronize();
}

void Event::block(Stream& stream) const {
  // Only events on the same core share a clock; a cross-core wait orders the host only.
  if (stream_ != nullptr && &stream_->core() == &stream.core()) stream.wait_until_ns(sim_time_ns_);
}

int Event::device_index() const { return stream_ == nullptr ? -1 : stream_->device_index(); }

void Event::check_timed(const Event& end) const {
  if (!timing_ || !end.timing_) {
    throw Error(ErrorCode::kInvalidArgument,
                "elapsed_time needs both events created with enable_timing=True");
  }
  if (!recorded() || !end.recorded()) {
    throw Error(ErrorCode::kInvalidArgument,
                "elapsed_time needs both events to have been recorded on a stream first");
  }
  synchronize();
  end.synchronize();
}

double Event::elapsed_ms(const Event& end) const {
  check_timed(end);
  return (end.sim_time_ns_ - sim_time_ns_) / 1e6;
}

double Event::host_elapsed_ms(const Event& end) const {
  check_timed(end);
  return static_cast<double>(end.host_time_ns_ - host_time_ns_) / 1e6;
}

}  // namespace nrtsim
