// One logical core's HBM. nrtsim backs device memory with host memory, but enforces the core's
// capacity so that programs which would not fit on the real chip fail here too. Large allocations
// come from SharedHbm, so that the job's other ranks can map them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "runtime/AddressRanges.h"

namespace nrtsim {

class HbmAllocator {
 public:
  // Every allocation is aligned (and its size rounded) to this many bytes, as DMA wants.
  static constexpr size_t kAlignment = 512;

  HbmAllocator(int device_index, uint64_t capacity);
  ~HbmAllocator();
  HbmAllocator(const HbmAllocator&) = delete;
  HbmAllocator& operator=(const HbmAllocator&) = delete;

  // Throws OutOfMemoryError when `bytes` (rounded up) does not fit in what is left.
  void* allocate(size_t bytes);
  // Throws Error(kInvalidArgument) for a pointer this allocator did not hand out.
  void free(void* ptr);

  bool owns(const void* ptr) const;  // true for any address inside a live allocation
  // True when all of [ptr, ptr + bytes) lies inside one live allocation.
  bool owns(const void* ptr, size_t bytes) const;
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const;
  uint64_t free_bytes() const;
  size_t live_allocations() const;
  static size_t rounded(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

 private:
  static void release(void* ptr);  // gives the host memory back, wherever it came from

  const int device_index_;
  const uint64_t capacity_;
  mutable std::mutex mutex_;
  uint64_t used_ = 0;
  AddressRanges live_;  // live allocations, at their rounded sizes
};

}  // namespace nrtsim
