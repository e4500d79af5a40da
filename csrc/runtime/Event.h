// A marker in a stream's order: it completes when the stream has run everything submitted before
// the marker, and (when timing is enabled) remembers when that happened.
#pragma once

#include <chrono>
#include <cstdint>

namespace nrtsim {

class Stream;

class Event {
 public:
  explicit Event(bool enable_timing) : timing_(enable_timing) {}

  void record(Stream& stream);   // re-recording moves the marker to the stream's current end
  bool recorded() const { return stream_ != nullptr; }
  bool query() const;            // an event never recorded counts as complete, as in CUDA
  void synchronize() const;      // blocks until complete
  bool timing_enabled() const { return timing_; }
  int device_index() const;      // -1 until recorded
  // Milliseconds from this event to `end`; throws Error(kInvalidArgument) unless both were
  // recorded with timing enabled.
  double elapsed_ms(const Event& end) const;

 private:
  bool timing_;
  Stream* stream_ = nullptr;
  uint64_t ticket_ = 0;
  std::chrono::steady_clock::time_point time_{};
};

}  // namespace nrtsim
