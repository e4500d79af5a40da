// The simulated Trainium clock of one logical NeuronCore. Each engine has a time at which it
// becomes free and each stream a cursor (Stream::sim_cursor_ns); a launch starts when its stream
// has finished what came before it and the engines it needs are free, and occupies each engine
// for the time the core's model gives (EngineModel.h; a collective's time comes from the link
// model, LinkModel.h). Work on different streams and different engines overlaps; work on one
// stream, or on one engine, does not.
#pragma once

#include <array>
#include <mutex>

#include "runtime/SpinLock.h"

#include "runtime/EngineModel.h"
#include "runtime/LaunchRecord.h"
#include "runtime/LinkModel.h"

namespace nrtsim {

class SimClock {
 public:
  explicit SimClock(CoreModel model, CoreLinks links = CoreLinks())
      : model_(std::move(model)), links_(std::move(links)) {}

  // Fills record.sim_begin_ns / sim_end_ns / engine_busy_ns from record.work and moves
  // `stream_cursor` to the end. `host_exclusive_ns` is the host time of work the device does not
  // model (CPU-fallback compute), charged as it was measured.
  void schedule(LaunchRecord& record, double& stream_cursor, double host_exclusive_ns);

  // The latest simulated time any launch on this core has reached.
  double now_ns() const;
  // Modelled busy time of each engine summed over every launch so far.
  std::array<double, kEngineCount> busy_totals_ns() const;
  const CoreModel& model() const { return model_; }
  const CoreLinks& links() const { return links_; }
  // Each engine's modelled busy time for `record`'s work (what schedule() charges).
  std::array<double, kEngineCount> busy_ns(const LaunchRecord& record) const;

 private:
  const CoreModel model_;
  const CoreLinks links_;
  mutable SpinLock mutex_;
  std::array<double, kEngineCount> free_at_ns_{};
  std::array<double, kEngineCount> busy_total_ns_{};
  double now_ns_ = 0;
};

}  // namespace nrtsim
