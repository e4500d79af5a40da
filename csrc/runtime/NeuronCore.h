// One logical NeuronCore as the process sees it: its HBM, its streams and its simulated clock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/EngineModel.h"
#include "runtime/HbmAllocator.h"
#include "runtime/SimClock.h"
#include "runtime/Stream.h"
#include "runtime/Topology.h"

namespace nrtsim {

class Runtime;

class NeuronCore {
 public:
  // Streams beyond the default come from fixed pools, one per priority, handed out round-robin:
  // user code may create streams in a loop, and a pool keeps that bounded (CUDA does the same).
  static constexpr uint32_t kPoolSize = 32;
  static constexpr uint32_t kDefaultStreamId = 0;

  NeuronCore(Runtime& runtime, const LogicalCore& info, const CoreModel& model,
             const CoreLinks& links);
  NeuronCore(const NeuronCore&) = delete;
  NeuronCore& operator=(const NeuronCore&) = delete;

  Runtime& runtime() const { return runtime_; }
  const LogicalCore& info() const { return info_; }
  int device_index() const { return info_.device_index; }
  HbmAllocator& hbm() { return hbm_; }
  SimClock& clock() { return clock_; }
  Stream& default_stream() { return *streams_[kDefaultStreamId]; }
  Stream& stream(uint32_t id);           // throws Error(kInvalidArgument) for an unknown id
  Stream& pool_stream(int priority);     // priority < 0 takes the high-priority pool
  uint32_t stream_count() const { return static_cast<uint32_t>(streams_.size()); }
  void synchronize();                    // every stream of the core

 private:
  Runtime& runtime_;
  LogicalCore info_;
  HbmAllocator hbm_;
  SimClock clock_;
  std::vector<std::unique_ptr<Stream>> streams_;  // [0] default, then normal pool, then high pool
  std::atomic<uint32_t> next_normal_{0};
  std::atomic<uint32_t> next_high_{0};
};

}  // namespace nrtsim
