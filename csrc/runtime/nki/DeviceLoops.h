// Device-side loops of a specialised NKI kernel (nl.fori_loop / nl.dynamic_range with register
// bounds, nl.while_loop, `while reg:`). The program holds each loop as a kLoopBegin, its body
// (traced once) and a kLoopEnd; the interpreter runs the body as many times as the registers say
// when the kernel runs, and reports how many times each loop's body ran.
//
// Time: the timeline (Timeline.h) is a list schedule of the program as traced, each body once,
// with every loop boundary a point no instruction crosses (the engines' sequencers branch there
// together; instructions of two iterations do not overlap). A loop's own time is its traced
// body's span less its inner loops' spans, and the same for its engines' busy time, FLOPs and
// DMA bytes. A run that executed a body n times in all costs the traced time plus (n - 1) times
// that loop's own time, for every loop: a body that never ran costs nothing.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/Engine.h"
#include "runtime/nki/Program.h"

namespace nrtsim::nki {

// A run stops a loop execution after this many iterations: a while loop whose condition
// register never reaches zero would not terminate on the hardware either.
inline constexpr int64_t kMaxLoopIterations = int64_t{1} << 24;

struct LoopNest {
  // Per instruction: for a kLoopBegin the index of its kLoopEnd, for a kLoopEnd its kLoopBegin;
  // -1 for the others.
  std::vector<int32_t> partner;
  // The kLoopBegin of every loop, in program order; loop k is begins[k].
  std::vector<int32_t> begins;
  // Per instruction: the innermost loop (index into begins) whose body holds it, or -1.
  std::vector<int32_t> innermost;
  // Per loop: the loop whose body holds it, or -1.
  std::vector<int32_t> parent;
  bool empty() const { return begins.empty(); }
  // The loop whose kLoopBegin is instruction i.
  int32_t loop_at(size_t i) const;
};

// Matches the program's loop markers; throws Error(kInvalidArgument) naming the instruction of a
// kLoopEnd without a loop or a kLoopBegin without an end.
LoopNest match_loops(const Program& program);

// Buffer lifetimes ([first, last] instruction, -1 for an unused buffer) widened so that a buffer
// used both inside a loop's body and outside it lives across the whole loop: the body runs
// again after its last use in program order, and must find the buffer still there.
void widen_lifetimes(const LoopNest& nest, std::vector<int64_t>& first,
                     std::vector<int64_t>& last);

// What the traced body of one loop costs on its own (its inner loops' bodies excluded).
struct LoopCost {
  double span_ns = 0;
  std::array<double, kEngineCount> busy_ns{};
  double matmul_flops = 0;
  double dma_bytes = 0;
  double dma_descriptors = 0;
  std::array<double, kEngineCount> instruction_count{};
  double begin_ns = 0;  // when the loop starts in the traced schedule
};

}  // namespace nrtsim::nki
