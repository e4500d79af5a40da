// An observer that keeps per-op totals of the records it sees: launches, per-engine work, bytes,
// host time and simulated time. torch_neuronx.kernel_trace() reads one; tests make their own.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "runtime/SpinLock.h"
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/LaunchObserver.h"

namespace nrtsim {

struct OpTotals {
  std::string op;
  LaunchKind kind = LaunchKind::kKernel;
  Engine engine = Engine::kVector;  // the main engine of the op's latest launch
  uint64_t launches = 0;
  std::array<uint64_t, kEngineCount> ops{};
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  std::array<uint64_t, kEngineCount> engine_bytes_read{};     // per engine (Work's entries)
  std::array<uint64_t, kEngineCount> engine_bytes_written{};
  int64_t host_ns = 0;
  double sim_ns = 0;
};

class LaunchTotals final : public LaunchObserver {
 public:
  void on_launch(const LaunchRecord& record) override;
  std::vector<OpTotals> snapshot() const;  // one row per op name, in first-launch order
  uint64_t total_launches() const;
  void clear();

 private:
  mutable SpinLock mutex_;
  std::unordered_map<const char*, size_t> index_;  // interned names: one pointer per text
  std::vector<OpTotals> rows_;
};

}  // namespace nrtsim
