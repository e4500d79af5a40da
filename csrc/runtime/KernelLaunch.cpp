#include "runtime/KernelLaunch.h"

#include <cstring>

namespace nrtsim {

const char* engine_name(Engine engine) {
  switch (engine) {
    case Engine::kTensor: return "tensor";
    case Engine::kVector: return "vector";
    case Engine::kScalar: return "scalar";
    case Engine::kGpSimd: return "gpsimd";
    case Engine::kDma: return "dma";
  }
  return "unknown";
}

ExecutionTrace& ExecutionTrace::global() {
  static ExecutionTrace* trace = new ExecutionTrace();  // never destroyed: kernels may run at exit
  return *trace;
}

void ExecutionTrace::record(const KernelInfo& info, uint64_t nanoseconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = index_.try_emplace(info.op, rows_.size());
  if (inserted) {
    // A different pointer may carry a name already seen (two interned copies): share its row.
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (rows_[i].op == info.op) {
        it->second = i;
        inserted = false;
        break;
      }
    }
    if (inserted) rows_.push_back(OpStats{info.op, info.engine});
  }
  OpStats& row = rows_[it->second];
  row.launches += 1;
  row.flops += info.flops;
  row.bytes += info.bytes;
  row.host_nanoseconds += nanoseconds;
}

std::vector<OpStats> ExecutionTrace::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rows_;
}

uint64_t ExecutionTrace::total_launches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t total = 0;
  for (const auto& row : rows_) total += row.launches;
  return total;
}

void ExecutionTrace::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  index_.clear();
  rows_.clear();
}

}  // namespace nrtsim
