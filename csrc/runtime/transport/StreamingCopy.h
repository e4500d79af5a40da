// Copies whose destination is not read again soon, for buffers larger than the caches: the
// collective moving whole tensors between ranks' device memory.
#pragma once

#include <cstddef>

namespace nrtsim::transport {

// Copies of at least this many bytes (in all) go around the caches: more than one core's L2,
// so they would not stay there for whoever reads them next. Measured on the 2-core Intel host
// with 4 ranks, all_gather_into_tensor (each rank copying its peers' parts out of their device
// memory), one part after another: 256 MiB in 52-63 ms against 75-82 ms with memcpy, 64 MiB in
// 14-15 against 19 ms; all parts together (copy_parts): 16 MiB in 2.3-3.2 ms against 4.1-4.5
// with memcpy, 4 and 8 MiB alike either way. Alone and cache-hot, memcpy is faster up to ~1 MiB
// (32 against 23 GB/s) and equal at 4-16 MiB.
constexpr size_t kStreamingCopyBytes = 4u << 20;

// memcpy(dst, src, n), with non-temporal stores when n >= kStreamingCopyBytes on x86-64.
// memcpy's stores first read each destination line into the cache and later write it back;
// streaming stores write it once, which is most of the copy's cost when nothing is cached.
// (glibc streams only above a fraction of the last-level cache it detects, which a virtual
// machine may report as hundreds of MiB.)
void copy_large(void* dst, const void* src, size_t n);

// Several copies at once (non-overlapping): memcpy(parts[k].dst, parts[k].src, parts[k].bytes).
// From kStreamingCopyBytes in all they run together, a cache line of each part in turn, with
// streaming stores: several streams of loads in flight where one copy after another kept one
// (4 parts of 64 MiB, one thread: 11.0-11.5 GB/s against 8.1-8.6 one after another, both
// streaming; all_gather_into_tensor at 256 MiB, 4 ranks: 46 against 52-63 ms).
struct CopyPart {
  void* dst;
  const void* src;
  size_t bytes;
};
void copy_parts(const CopyPart* parts, int count);

}  // namespace nrtsim::transport
