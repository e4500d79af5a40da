// The launch record: what one touch of device memory did. Every kernel, copy, scalar read, storage
// resize, CPU-fallback computation, compiled program, NKI kernel and collective yields exactly one,
// published to the observers registered with the runtime (LaunchObserver.h). The profiler, op
// tracking, the kernel trace and the cost model all read these records and nothing else.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "runtime/CollectiveTraffic.h"
#include "runtime/Engine.h"

namespace nrtsim {

enum class LaunchKind : uint8_t {
  kKernel,              // a native kernel
  kCopyHostToDevice,
  kCopyDeviceToHost,
  kCopyDeviceToDevice,
  kScalarRead,          // item() and other reads of one element by the host
  kResize,              // a storage growing into a new HBM block
  kHostFallback,        // an op computed on the host by the CPU fallback (its copies are own records)
  kProgram,             // a compiled program
  kNkiKernel,           // an NKI kernel
  kCollective,          // a collective over the cores of one or more hosts
};
const char* launch_kind_name(LaunchKind kind);

// The number format the Tensor engine consumes and the Vector engine streams: 16-bit floats run
// at twice the rate of 32-bit ones on both (and FP8 at twice that again on the Tensor engine).
enum class Precision : uint8_t { kFp32, kBf16, kFp8 };
const char* precision_name(Precision precision);

// What one launch asks of one engine. `ops` counts FLOPs on the Tensor engine and elements on the
// others; bytes are what the engine reads from and writes to HBM (the DMA engine's own entry is
// for copies, whose bytes it moves itself).
struct EngineWork {
  uint64_t ops = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
};

struct Work {
  std::array<EngineWork, kEngineCount> engines{};
  Precision precision = Precision::kFp32;
  // A collective (LaunchKind::kCollective): what it moves over the links, as its process group
  // reports it; the clock prices it with the link model (LinkModel.h).
  CollectiveTraffic collective;
  // An NKI kernel, which schedules its own instructions on the engines (timed per instruction),
  // sets these: each engine's busy time and the time from its start to its end,
  // which the clock then uses instead of deriving both from the rates.
  bool has_timeline = false;
  std::array<double, kEngineCount> timeline_busy_ns{};
  double timeline_ns = 0;
  // An NKI kernel also sets, per engine, when its first instruction starts and its last one ends,
  // from the start of its timeline (the launch's fixed cost comes before it): the profiler shows
  // the kernel on each engine's track over that span. 0 and 0 for an unused engine.
  std::array<double, kEngineCount> timeline_begin_ns{};
  std::array<double, kEngineCount> timeline_end_ns{};

  EngineWork& operator[](Engine e) { return engines[index_of(e)]; }
  const EngineWork& operator[](Engine e) const { return engines[index_of(e)]; }
  uint64_t bytes_read() const;
  uint64_t bytes_written() const;
  uint64_t ops() const;            // all engines
  Engine main_engine() const;      // the engine with the most ops (the DMA engine for pure moves)
};

struct LaunchRecord {
  const char* op = "";              // interned: compare by pointer or by text
  LaunchKind kind = LaunchKind::kKernel;
  int device = -1;
  uint32_t stream = 0;
  Work work;
  uint64_t correlation_id = 0;      // of the framework op that caused it (0: none current)
  int64_t host_begin_ns = 0;        // steady clock, while the simulator executed it
  int64_t host_end_ns = 0;
  double sim_begin_ns = 0;          // the device's simulated Trainium clock
  double sim_end_ns = 0;
  std::array<double, kEngineCount> engine_busy_ns{};  // modelled time each engine was occupied

  double sim_duration_ns() const { return sim_end_ns - sim_begin_ns; }
};

// A stable pointer for `name`, the same pointer for the same text: record names are compared and
// hashed by pointer on the hot path.
const char* intern(std::string_view name);

}  // namespace nrtsim
