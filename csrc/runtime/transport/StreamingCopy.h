// Copies whose destination is not read again soon, for buffers larger than the caches: the
// collective moving a whole tensor between ranks' device memory.
#pragma once

#include <cstddef>

namespace nrtsim::transport {

// Copies of at least this many bytes go around the caches: more than one core's L2, so they
// would not stay there for whoever reads them next. Measured on the 2-core Intel host with 4
// ranks, all_gather_into_tensor (each rank copying its peers' parts out of their device memory):
// 256 MiB in 52-63 ms against 75-82 ms with memcpy, 64 MiB in 14-15 against 19 ms, 16 MiB (4 MiB
// parts) 3.9-4.4 against 4.5-4.8 ms. Alone and cache-hot, memcpy is faster up to ~1 MiB (32
// against 23 GB/s) and equal at 4-16 MiB.
constexpr size_t kStreamingCopyBytes = 4u << 20;

// memcpy(dst, src, n), with non-temporal stores when n >= kStreamingCopyBytes on x86-64.
// memcpy's stores first read each destination line into the cache and later write it back;
// streaming stores write it once, which is most of the copy's cost when nothing is cached.
// (glibc streams only above a fraction of the last-level cache it detects, which a virtual
// machine may report as hundreds of MiB.)
void copy_large(void* dst, const void* src, size_t n);

}  // namespace nrtsim::transport
