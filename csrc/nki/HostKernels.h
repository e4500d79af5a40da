// What a host with a tuned math library lends the nki package's interpreter: torch_neuronx
// hands these to nki._nki as a PyCapsule named "nrtsim.nki.HostKernels" (the dependency points
// from torch_neuronx to nki, never back). The scope functions bracket one kernel run: ATen's
// GEMMs run single-threaded inside it (tile-sized GEMMs lose more to waking workers than they
// gain).
#pragma once

#include "runtime/nki/Interpreter.h"

namespace nrtsim::nki {

struct HostKernels {
  MatmulKernel matmul = nullptr;
  void* (*enter_run)() = nullptr;     // returns a token for exit_run
  void (*exit_run)(void*) = nullptr;
};

inline constexpr const char* kHostKernelsCapsule = "nrtsim.nki.HostKernels";
inline constexpr const char* kExecutableCapsule = "nrtsim.nki.Executable";
// A const nrtsim::nki::CollectiveHook* (the nki package's exchange, owned by it for the process).
inline constexpr const char* kCollectiveHookCapsule = "nrtsim.nki.CollectiveHook";
// A const nrtsim::CoreLinks* (a device's links, owned by the capsule), for timing collectives.
inline constexpr const char* kCoreLinksCapsule = "nrtsim.CoreLinks";

}  // namespace nrtsim::nki
