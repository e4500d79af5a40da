// Executes a specialised NKI kernel (Program.h) on the host: every instruction in program order,
// vectorised over its whole tile. Values are loaded into FP32, computed as the engine computes them
// (FP32 arithmetic, FP32 accumulation in PSUM) and rounded to the destination's format on write.
// On-chip tiles and HBM scratch live in storage the executable owns, reused between tiles whose
// lifetimes do not overlap (as the NKI allocator does), and each starts poisoned (NaN) when the
// kernel allocates it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/nki/DeviceLoops.h"
#include "runtime/nki/Collective.h"
#include "runtime/nki/Program.h"

namespace nrtsim::nki {

// out[M,N] (+)= stationary[K,M]^T @ moving[K,N], all FP32: out row-major and dense; row kk of
// stationary at stationary + kk * stationary_rows (M contiguous values), of moving at
// moving + kk * moving_rows (N contiguous values), so that a window into a wider tile is read in
// place. The runtime's own loop is the default; a host with a tuned GEMM (the backend installs
// ATen's) can replace it.
using MatmulKernel = void (*)(int64_t m, int64_t n, int64_t k, const float* stationary,
                              int64_t stationary_rows, const float* moving, int64_t moving_rows,
                              float* out, bool accumulate);
void set_matmul_kernel(MatmulKernel kernel);

// Memory the caller owns: a kernel input or output in HBM (or host memory for standalone runs).
struct External {
  uint8_t* data = nullptr;
  int64_t bytes = 0;
};

class Executable {
 public:
  // Checks that every view lies inside its buffer; throws Error(kInvalidArgument) otherwise.
  explicit Executable(Program program);

  const Program& program() const { return program_; }
  // Bytes of on-chip storage the executable allocates per run (after reuse).
  int64_t scratch_bytes() const { return scratch_bytes_; }

  // Runs the kernel over `externals` (one per bound buffer, by binding index). Returns what
  // device_print produced, one line per print. `collectives` exchanges the tiles of its
  // collective instructions with the other ranks (Collective.h); a kernel without them needs none.
  // `loop_iterations`, when given, receives per device loop (loops().begins order) how many times
  // its body ran in all.
  std::vector<std::string> run(const std::vector<External>& externals,
                               const CollectiveHook* collectives = nullptr,
                               std::vector<int64_t>* loop_iterations = nullptr) const;
  // The program's device loops (DeviceLoops.h); empty for a kernel without any.
  const LoopNest& loops() const { return nest_; }

 private:
  Program program_;
  LoopNest nest_;
  std::vector<int64_t> slot_of_;        // per buffer: its slot in scratch, -1 for external ones
  std::vector<int64_t> slot_bytes_;     // per slot
  std::vector<std::vector<int32_t>> poison_before_;  // per instruction: buffers allocated there
  // per buffer: poisoned when allocated (a kernel buffer not written whole by its first
  // instruction) or before the run (a kernel output not written whole before it is read)
  std::vector<char> poison_;
  // per instruction: a memset of a kernel buffer that the next instruction using the buffer
  // overwrites whole without reading it (nothing could see its values): not executed
  std::vector<char> overwritten_;
  int64_t scratch_bytes_ = 0;
  std::vector<int64_t> slot_offset_;    // per slot: its offset in a run's scratch block

  // Scratch blocks that finished runs gave back, for the next run: a fresh block per run was
  // fresh pages from the OS, and faulting them in cost as much as small kernels' own work. At
  // most one is kept idle per executable (more only while runs overlap), and only a block of
  // at most kPooledScratchBytes: a cached executable does not pin a large kernel's scratch
  // between calls (faulting in a large block is small next to the run that fills it).
  static constexpr int64_t kPooledScratchBytes = int64_t{64} << 20;
  struct ScratchPool {
    std::mutex mu;
    std::vector<std::unique_ptr<uint8_t[]>> idle;
  };
  std::shared_ptr<ScratchPool> pool_ = std::make_shared<ScratchPool>();
};

}  // namespace nrtsim::nki
