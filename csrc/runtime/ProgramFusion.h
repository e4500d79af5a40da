// The fusion rule of a compiled program, stated once: inside a program the compiler fuses
// elementwise work, casts and copies into their neighbours, so an intermediate crosses HBM once
// (written by its producer, read by the Tensor-engine op that consumes it), not once per op that
// touches it. An op whose main engine is not the Tensor engine (elementwise, reductions, gathers)
// and a device-to-device copy therefore keep only the bytes they write; Tensor-engine ops keep
// everything they read and write. Arithmetic is unchanged.
//
// Used by the backend to sum a compiled program's work from its ops (program records) and by the
// estimate's projection of compiled phases (docs/estimate.md). Torch-free.
#pragma once

#include "runtime/LaunchRecord.h"

namespace nrtsim {

// `work`: one op's work as a launch of its own of `kind` would record it.
Work work_inside_program(const Work& work, LaunchKind kind);

}  // namespace nrtsim
