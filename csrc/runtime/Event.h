// A marker in a stream's order: it completes when the stream has run everything submitted before
// the marker, and (when timing is enabled) remembers when that happened — on the simulated
// Trainium clock (the stream's cursor), and on the host clock.
#pragma once

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
  // Later work on `stream` starts (in simulated time) no earlier than this event.
  void block(Stream& stream) const;
  bool timing_enabled() const { return timing_; }
  int device_index() const;      // -1 until recorded
  double sim_time_ns() const { return sim_time_ns_; }
  // Modelled Trainium milliseconds from this event to `end`; throws Error(kInvalidArgument)
  // unless both were recorded with timing enabled.
  double elapsed_ms(const Event& end) const;
  // The same interval in host wall time (what the simulator itself took).
  double host_elapsed_ms(const Event& end) const;

 private:
  void check_timed(const Event& end) const;

  bool timing_;
  Stream* stream_ = nullptr;
  uint64_t ticket_ = 0;
  double sim_time_ns_ = 0;
  int64_t host_time_ns_ = 0;
};

}  // namespace nrtsim
