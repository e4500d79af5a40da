// The one way work reaches a NeuronCore. Every kernel names its op, the FLOPs it performs, the
// bytes it moves and the engine it would occupy on Trainium; the execution trace aggregates these
// so the profiler and the cost model need no cooperation from individual kernels.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/Stream.h"

namespace nrtsim {

enum class Engine : uint8_t { kTensor, kVector, kScalar, kGpSimd, kDma };
const char* engine_name(Engine engine);

struct KernelInfo {
  // Must outlive the process's use of the trace: a string literal or an interned name.
  const char* op;
  uint64_t flops = 0;
  uint64_t bytes = 0;
  Engine engine = Engine::kVector;
};

struct OpStats {
  std::string op;
  Engine engine;
  uint64_t launches = 0;
  uint64_t flops = 0;
  uint64_t bytes = 0;
  uint64_t host_nanoseconds = 0;  // time the simulator spent executing it
};

class ExecutionTrace {
 public:
  static ExecutionTrace& global();
  void record(const KernelInfo& info, uint64_t nanoseconds);
  std::vector<OpStats> snapshot() const;  // one row per op name, in first-launch order
  uint64_t total_launches() const;
  void clear();

 private:
  mutable std::mutex mutex_;
  // Keyed by the name pointer: the fast path hashes a pointer, not a string.
  std::unordered_map<const char*, size_t> index_;
  std::vector<OpStats> rows_;
};

// Runs `body` on `stream` as the kernel described by `info` and records it in the trace.
template <class Body>
void launch(Stream& stream, const KernelInfo& info, Body&& body) {
  stream.submit([&] {
    const auto start = std::chrono::steady_clock::now();
    body();
    const auto elapsed = std::chrono::steady_clock::now() - start;
    ExecutionTrace::global().record(
        info, static_cast<uint64_t>(
                  std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()));
  });
}

}  // namespace nrtsim
