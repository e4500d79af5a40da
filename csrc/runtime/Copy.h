// Host <-> HBM and HBM <-> HBM transfers: DMA work, ordered on a stream like any kernel.
#pragma once

#include <cstddef>

#include "runtime/Stream.h"

namespace nrtsim {

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// Copies `bytes` from `src` to `dst` in `stream`'s order as one launch whose kind is the direction,
// named `trace_name` when given (the framework op that asked for it), else by direction.
// Device-side pointers are checked against the HBM of the runtime's cores: a host pointer passed
// as a device one is an Error(kInvalidArgument), not a silent memcpy.
void copy(Stream& stream, void* dst, const void* src, size_t bytes, CopyKind kind,
          const char* trace_name = nullptr);

}  // namespace nrtsim
