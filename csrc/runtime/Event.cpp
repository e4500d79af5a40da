#include "runtime/Event.h"

#include "runtime/Error.h"
#include "runtime/Stream.h"

namespace nrtsim {

void Event::record(Stream& stream) {
  // The marker goes through the queue like any work, so it is stamped when the stream gets there.
  stream.submit([&] {
    stream_ = &stream;
    ticket_ = stream.submitted();
    if (timing_) time_ = std::chrono::steady_clock::now();
  });
}

bool Event::query() const { return stream_ == nullptr || stream_->reached(ticket_); }

void Event::synchronize() const {
  if (stream_ != nullptr && !stream_->reached(ticket_)) stream_->synchronize();
}

int Event::device_index() const { return stream_ == nullptr ? -1 : stream_->device_index(); }

double Event::elapsed_ms(const Event& end) const {
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
  return std::chrono::duration<double, std::milli>(end.time_ - time_).count();
}

}  // namespace nrtsim
