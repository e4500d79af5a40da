#include "runtime/LaunchRecord.h"

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

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

const char* launch_kind_name(LaunchKind kind) {
  switch (kind) {
    case LaunchKind::kKernel: return "kernel";
    case LaunchKind::kCopyHostToDevice: return "copy_host_to_device";
    case LaunchKind::kCopyDeviceToHost: return "copy_device_to_host";
    case LaunchKind::kCopyDeviceToDevice: return "copy_device_to_device";
    case LaunchKind::kScalarRead: return "scalar_read";
    case LaunchKind::kResize: return "resize";
    case LaunchKind::kHostFallback: return "host_fallback";
    case LaunchKind::kProgram: return "program";
    case LaunchKind::kNkiKernel: return "nki_kernel";
    case LaunchKind::kCollective: return "collective";
  }
  return "unknown";
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp8: return "fp8";
  }
  return "unknown";
}

uint64_t Work::bytes_read() const {
  uint64_t total = 0;
  for (const auto& e : engines) total += e.bytes_read;
  return total;
}

uint64_t Work::bytes_written() const {
  uint64_t total = 0;
  for (const auto& e : engines) total += e.bytes_written;
  return total;
}

uint64_t Work::ops() const {
  uint64_t total = 0;
  for (const auto& e : engines) total += e.ops;
  return total;
}

Engine Work::main_engine() const {
  Engine best = Engine::kDma;
  uint64_t most = 0;
  for (Engine e : kAllEngines) {
    if (engines[index_of(e)].ops > most) {
      most = engines[index_of(e)].ops;
      best = e;
    }
  }
  if (most == 0) {
    // No arithmetic: the engine that touches the most bytes (a copy, a gather).
    uint64_t bytes = 0;
    for (Engine e : kAllEngines) {
      const auto& w = engines[index_of(e)];
      if (w.bytes_read + w.bytes_written > bytes) {
        bytes = w.bytes_read + w.bytes_written;
        best = e;
      }
    }
  }
  return best;
}

const char* intern(std::string_view name) {
  static std::mutex mutex;
  // Never destroyed: records may be published while static objects are torn down at exit.
  static auto* names = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mutex);
  return names->emplace(name).first->c_str();
}

}  // namespace nrtsim
