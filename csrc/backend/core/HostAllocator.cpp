#include "backend/core/HostAllocator.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "runtime/AddressRanges.h"

namespace torch_neuronx {
namespace {

constexpr size_t kPageSize = 4096;

class NeuronHostAllocator final : public at::HostAllocator {
 public:
  at::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return at::DataPtr(nullptr, nullptr, &free_ptr, at::DeviceType::CPU);
    const size_t size = (nbytes + kPageSize - 1) / kPageSize * kPageSize;
    void* ptr = std::aligned_alloc(kPageSize, size);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "pinned host allocation of ", nbytes,
                     " bytes failed: the host is out of memory");
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(ptr, size);
    stats_.allocations.increase(1);
    stats_.allocated_bytes.increase(size);
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(size);
    stats_.num_host_alloc += 1;
    return at::DataPtr(ptr, ptr, &free_ptr, at::DeviceType::CPU);
  }

  at::DeleterFnPtr raw_deleter() const override { return &free_ptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}  // nothing is cached: blocks are freed when released

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocations.reset_accumulated();
    stats_.allocated_bytes.reset_accumulated();
    stats_.active_requests.reset_accumulated();
    stats_.active_bytes.reset_accumulated();
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocations.reset_peak();
    stats_.allocated_bytes.reset_peak();
    stats_.active_requests.reset_peak();
    stats_.active_bytes.reset_peak();
  }

  bool contains(const void* ptr) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.contains(ptr);
  }

  void release(void* ptr) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const std::optional<size_t> size = live_.erase(ptr);
      TORCH_INTERNAL_ASSERT(size, "pinned allocator: freeing an unknown pointer");
      stats_.allocations.decrease(1);
      stats_.allocated_bytes.decrease(*size);
      stats_.active_requests.decrease(1);
      stats_.active_bytes.decrease(*size);
      stats_.num_host_free += 1;
    }
    std::free(ptr);
  }

 private:
  static void free_ptr(void* ptr);
  mutable std::mutex mutex_;
  nrtsim::AddressRanges live_;  // live pinned blocks, at their page-rounded sizes
  at::HostStats stats_;
};

NeuronHostAllocator* const g_host_allocator = new NeuronHostAllocator();

void NeuronHostAllocator::free_ptr(void* ptr) {
  if (ptr != nullptr) g_host_allocator->release(ptr);
}

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, g_host_allocator);

}  // namespace

at::HostAllocator& host_allocator() { return *g_host_allocator; }
bool is_pinned(const void* ptr) { return ptr != nullptr && g_host_allocator->contains(ptr); }

}  // namespace torch_neuronx
