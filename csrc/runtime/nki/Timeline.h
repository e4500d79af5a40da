// When each instruction of a specialised NKI kernel runs on a NeuronCore, per engine. Each
// instruction occupies its engine for its modelled cycles; an instruction starts when its engine
// is free and every earlier instruction it depends on (it reads what they write, or writes what
// they read or write: the semaphores the NKI compiler inserts) has finished. Independent
// instructions on different engines therefore overlap and dependencies serialise. SPMD programs
// (kernel[grid]) run on engines of their own.
//
// Per-instruction costs (shared/research/trainium_nki.md §1.2, §5; rates from the core spec):
//   Tensor: a matmul of moving free size N takes max(N, 64) cycles for 16-bit and 8-bit inputs,
//     tensor_fp32_slowdown times that for FP32; a transpose is a matmul against the identity.
//     The stationary load runs in the background and is not charged. The engine issues in
//     program order; a matmul with tile_position / tile_size holds only its rows x columns of
//     the 128 x 128 PE array (32 x 32 cells), so matmuls on disjoint tiles run at the same time
//     (AWS's nc_matmul "Tiling mode") and ones that share a cell take turns.
//   Vector / Scalar / GpSimd: free elements per partition x 128 / the engine's elements per cycle
//     (16-bit rate when every operand is 16-bit or narrower), twice for two streamed inputs, plus
//     60 cycles to start the SBUF/PSUM access.
//   DMA: DmaModel.h: descriptors spread over the core's DMA engines (queues), each engine paying
//     a fixed setup per transfer and a cost per descriptor besides its bytes; a transfer's shares
//     go to the engines that free up first, and its data is usable a fixed latency later. DMA
//     busy time is the time any DMA engine is busy.
//   Collective (nki.collectives, Collective.h): the call's time on the runtime's link model
//     (LinkModel.h), every DMA engine of the core busy for it.
#pragma once

#include <array>
#include <vector>

#include "runtime/Engine.h"
#include "runtime/EngineModel.h"
#include "runtime/nki/DeviceLoops.h"
#include "runtime/LinkModel.h"
#include "runtime/nki/DmaModel.h"
#include "runtime/nki/Program.h"

namespace nrtsim::nki {

inline constexpr double kAccessStartCycles = 60;
inline constexpr double kMatmulMinCycles = 64;
// A Vector / Scalar / GpSimd instruction with an operand placed at run time (a register or an
// SBUF index read when it runs) takes at least this many engine cycles: AWS's
// nki.isa.tensor_copy_dynamic_src / _dst pages give max(MIN_II_DYNAMIC, N) cycles, "MIN_II_DYNAMIC
// is the minimum instruction initiation interval for instructions with dynamic source
// [destination] location ... roughly 600 engine cycles".
inline constexpr double kDynamicOffsetMinCycles = 600;

struct InstructionTime {
  double start_ns = 0;
  double end_ns = 0;
};

struct Timeline {
  std::vector<InstructionTime> instructions;
  // Occupation of each engine summed over the SPMD programs.
  std::array<double, kEngineCount> busy_ns{};
  double makespan_ns = 0;
  uint64_t matmul_flops = 0;  // useful multiply-adds x 2 of the Tensor engine (no transposes)
  std::array<uint64_t, kEngineCount> instruction_count{};
  uint64_t dma_bytes = 0;
  uint64_t dma_descriptors = 0;  // DMA descriptors the transfers take (contiguous chunks)
  // Per engine, over all SPMD programs: when its first instruction starts and when its last one
  // ends (for DMA: when the data is ready, as `instructions` has it); 0 and 0 for an unused
  // engine. The profiler draws these as the kernel's span on each engine's track.
  std::array<double, kEngineCount> engine_begin_ns{};
  std::array<double, kEngineCount> engine_end_ns{};
  // Per device loop (LoopNest::begins order): its traced body's own cost (DeviceLoops.h). The
  // figures above count every body once; with_iterations scales them to a run's counts.
  std::vector<LoopCost> loops;
};

// How long `in` occupies its engine on a core of `spec` (for DMA: its busiest DMA engine).
double instruction_ns(const Program& program, const Instruction& in, const CoreSpec& spec);
// A DMA transfer's occupation of each DMA engine it uses.
std::vector<double> dma_engine_times(const Program& program, const Instruction& in,
                                     const DmaSpec& dma);
// `links`: the core's links, which price collective instructions (Collective.h); a program with
// a collective of several ranks needs them.
Timeline schedule(const Program& program, const CoreSpec& spec, const CoreLinks* links = nullptr);
// The timeline of a run whose device loops' bodies ran `iterations` times in all (per loop, as
// Executable::run reports them): each loop's own cost counted that many times instead of once.
// Per-instruction times stay those of the traced schedule.
Timeline with_iterations(const Timeline& traced, const std::vector<int64_t>& iterations);

}  // namespace nrtsim::nki
