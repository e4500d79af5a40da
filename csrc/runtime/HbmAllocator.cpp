#include "runtime/HbmAllocator.h"

#include <cstdlib>
#include <string>

#include "runtime/Error.h"
#include "runtime/SharedHbm.h"

namespace nrtsim {

HbmAllocator::HbmAllocator(int device_index, uint64_t capacity)
    : device_index_(device_index), capacity_(capacity) {}

HbmAllocator::~HbmAllocator() {
  // The process is going away; give the host memory back.
  live_.for_each([](void* start, size_t) { release(start); });
}

void* HbmAllocator::allocate(size_t bytes) {
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  // `bytes` is checked too: rounding a request within kAlignment of SIZE_MAX wraps to 0.
  if (bytes > capacity_ - used_ || size > capacity_ - used_) {
    throw OutOfMemoryError(device_index_, bytes, capacity_ - used_, capacity_);
  }
  // Large buffers live where the job's other ranks can map them (collectives move them without a
  // host copy in between); small ones, or all where that is refused, in private memory.
  void* ptr = SharedHbm::instance().allocate(size);
  if (ptr == nullptr) ptr = std::aligned_alloc(kAlignment, size);
  if (ptr == nullptr) {
    // The simulated core has room but the host does not: a host limit, not the core's capacity,
    // and the error says so (raising NRTSIM_HBM_BYTES would not help).
    throw OutOfMemoryError(device_index_, bytes, capacity_ - used_, capacity_,
                           OomCause::kHostRefused);
  }
  used_ += size;
  live_.insert(ptr, size);
  return ptr;
}

void HbmAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const std::optional<size_t> size = live_.erase(ptr);
  if (!size) {
    throw Error(ErrorCode::kInvalidArgument,
                "HbmAllocator::free: pointer was not allocated on neuron:" +
                    std::to_string(device_index_));
  }
  used_ -= *size;
  release(ptr);
}

void HbmAllocator::release(void* ptr) {
  if (!SharedHbm::instance().release(ptr)) std::free(ptr);
}

bool HbmAllocator::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.contains(ptr);
}

bool HbmAllocator::owns(const void* ptr, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.contains(ptr, bytes);
}

uint64_t HbmAllocator::used() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_;
}

uint64_t HbmAllocator::free_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_ - used_;
}

size_t HbmAllocator::live_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.size();
}

}  // namespace nrtsim
