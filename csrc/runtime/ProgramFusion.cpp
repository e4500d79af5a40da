#include "runtime/ProgramFusion.h"

namespace nrtsim {

Work work_inside_program(const Work& work, LaunchKind kind) {
  const bool fused = (kind == LaunchKind::kKernel && work.main_engine() != Engine::kTensor) ||
                     kind == LaunchKind::kCopyDeviceToDevice;
  if (!fused) return work;
  Work kept = work;
  for (EngineWork& e : kept.engines) e.bytes_read = 0;
  return kept;
}

}  // namespace nrtsim
