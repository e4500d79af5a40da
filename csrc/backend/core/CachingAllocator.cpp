#include "backend/core/CachingAllocator.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/core/NeuronRuntime.h"
#include "runtime/HbmAllocator.h"
#include "runtime/SpinLock.h"

namespace torch_neuronx {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kSmallRequest = 1 << 20;  // below: small pool

// Size classes: 512-byte steps below 1 MiB, then four classes per power of two, so that a cached
// block is reused for requests up to ~25% smaller without wasting more than that.
size_t round_size(size_t bytes) {
  if (bytes < kSmallRequest) return nrtsim::HbmAllocator::rounded(bytes == 0 ? 1 : bytes);
  size_t power = kSmallRequest;
  while (power * 2 <= bytes) power *= 2;
  const size_t step = power / 4;
  return (bytes + step - 1) / step * step;
}

struct Block {
  void* ptr;
  size_t size;       // reserved bytes (a size class)
  size_t requested;  // bytes the caller asked for
  c10::DeviceIndex device;
};

using CachedBlocks = std::multimap<size_t, void*>;  // size class -> free block, best fit first
using LiveBlocks = std::unordered_map<void*, Block>;  // live allocations, by address

struct DeviceState {
  CachedBlocks cached;
  DeviceStats stats;
};

// Map nodes set aside for reuse. An allocation moves a block from the cache's map to the live
// map and a free moves it back; recycling the nodes keeps a warm allocate/free pair free of heap
// calls, which were a measurable share of a small op's cost.
template <class Map>
class SpareNodes {
 public:
  void keep(typename Map::node_type node) {
    if (nodes_.size() < kCapacity) nodes_.push_back(std::move(node));
  }
  template <class Key, class Value>
  void insert(Map& map, Key key, Value value) {
    if (nodes_.empty()) {
      map.emplace(key, value);
      return;
    }
    typename Map::node_type node = std::move(nodes_.back());
    nodes_.pop_back();
    node.key() = key;
    node.mapped() = value;
    map.insert(std::move(node));
  }

 private:
  static constexpr size_t kCapacity = 64;
  std::vector<typename Map::node_type> nodes_;
};

StatType pool_of(size_t size) { return size < kSmallRequest ? StatType::SMALL_POOL : StatType::LARGE_POOL; }

void increase(c10::CachingAllocator::StatArray& stat, size_t size, size_t amount) {
  stat[static_cast<size_t>(StatType::AGGREGATE)].increase(amount);
  stat[static_cast<size_t>(pool_of(size))].increase(amount);
}
void decrease(c10::CachingAllocator::StatArray& stat, size_t size, size_t amount) {
  stat[static_cast<size_t>(StatType::AGGREGATE)].decrease(amount);
  stat[static_cast<size_t>(pool_of(size))].decrease(amount);
}

class NeuronCachingAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = current_device();
    const c10::Device where(c10::DeviceType::PrivateUse1, device);
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &free_ptr, where);

    std::lock_guard<nrtsim::RecursiveSpinLock> lock(mutex_);
    DeviceState& state = state_of(device);
    size_t size = round_size(nbytes);
    void* ptr = take_cached(state, size);  // a cached block may be larger: `size` becomes its size
    // The core (and its validation) only when HBM itself is asked: a cache hit needs neither.
    if (ptr == nullptr) ptr = reserve(core(device), state, nbytes, size);
    spare_live_.insert(blocks_, ptr, Block{ptr, size, nbytes, device});
    increase(state.stats.allocation, size, 1);
    increase(state.stats.active, size, 1);
    increase(state.stats.allocated_bytes, size, size);
    increase(state.stats.active_bytes, size, size);
    increase(state.stats.requested_bytes, size, nbytes);
    return c10::DataPtr(ptr, ptr, &free_ptr, where);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_ptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override { return nrtsim::Runtime::is_initialized(); }

  void emptyCache(c10::MempoolId_t) override {
    if (!nrtsim::Runtime::is_initialized() || nrtsim::Runtime::in_forked_child()) return;
    std::lock_guard<nrtsim::RecursiveSpinLock> lock(mutex_);
    for (size_t device = 0; device < states_.size(); ++device) {
      if (states_[device]) release_cached(core(static_cast<c10::DeviceIndex>(device)), *states_[device]);
    }
  }

  void recordStream(const c10::DataPtr&, c10::Stream) override {
    // Streams execute host-synchronously: a block's uses on any stream are complete when it is
    // freed, so no cross-stream bookkeeping is needed before reuse.
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    device = resolve_device_index(device);  // the single core's alias is neuron:0
    std::lock_guard<nrtsim::RecursiveSpinLock> lock(mutex_);
    return state_of(device).stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    device = resolve_device_index(device);  // the single core's alias is neuron:0
    std::lock_guard<nrtsim::RecursiveSpinLock> lock(mutex_);
    DeviceStats& stats = state_of(device).stats;
    for (auto* array : all_arrays(stats)) {
      for (auto& stat : *array) stat.reset_accumulated();
    }
    stats.oversize_allocations.reset_accumulated();
    stats.oversize_segments.reset_accumulated();
    stats.num_alloc_retries = 0;
    stats.num_ooms = 0;
    stats.num_sync_all_streams = 0;
    stats.num_device_alloc = 0;
    stats.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    device = resolve_device_index(device);  // the single core's alias is neuron:0
    std::lock_guard<nrtsim::RecursiveSpinLock> lock(mutex_);
    DeviceStats& stats = state_of(device).stats;
    for (auto* array : all_arrays(stats)) {
      for (auto& stat : *array) stat.reset_peak();
    }
    stats.oversize_allocations.reset_peak();
    stats.oversize_segments.reset_peak();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    nrtsim::NeuronCore& neuron_core = core(resolve_device_index(device));
    return {neuron_core.hbm().free_bytes(), neuron_core.hbm().capacity()};
  }

  bool owns(void* ptr) {
    std::lock_guard<nrtsim::RecursiveSpinLock> lock(mutex_);
    return blocks_.count(ptr) != 0;
  }

  void free(void* ptr) {
    std::lock_guard<nrtsim::RecursiveSpinLock> lock(mutex_);
    auto it = blocks_.find(ptr);
    TORCH_INTERNAL_ASSERT(it != blocks_.end(), "neuron allocator: freeing an unknown pointer");
    const Block block = it->second;
    spare_live_.keep(blocks_.extract(it));
    DeviceState& state = state_of(block.device);
    decrease(state.stats.allocation, block.size, 1);
    decrease(state.stats.active, block.size, 1);
    decrease(state.stats.allocated_bytes, block.size, block.size);
    decrease(state.stats.active_bytes, block.size, block.size);
    decrease(state.stats.requested_bytes, block.size, block.requested);
    if (nrtsim::Runtime::in_forked_child()) return;  // the parent's memory: leave it be
    spare_cached_.insert(state.cached, block.size, block.ptr);
  }

 private:
  static void free_ptr(void* ptr);

  static std::vector<c10::CachingAllocator::StatArray*> all_arrays(DeviceStats& s) {
    return {&s.allocation,      &s.segment,      &s.active,
            &s.inactive_split,  &s.allocated_bytes, &s.reserved_bytes,
            &s.active_bytes,    &s.inactive_split_bytes, &s.requested_bytes};
  }

  DeviceState& state_of(c10::DeviceIndex device) {
    if (states_.size() <= static_cast<size_t>(device)) states_.resize(device + 1);
    if (!states_[device]) states_[device] = std::make_unique<DeviceState>();
    return *states_[device];
  }

  // Best fit among cached blocks of the same size class or up to one class larger. Sets `size`
  // to the block's real size: recording the smaller requested class instead would make the stats
  // and the cache give back less than was reserved, so memory_reserved() would drift upwards.
  void* take_cached(DeviceState& state, size_t& size) {
    auto it = state.cached.lower_bound(size);
    if (it == state.cached.end() || it->first > size + size / 4) return nullptr;
    void* ptr = it->second;
    size = it->first;
    spare_cached_.keep(state.cached.extract(it));
    return ptr;
  }

  void* reserve(nrtsim::NeuronCore& neuron_core, DeviceState& state, size_t nbytes, size_t size) {
    void* ptr = nullptr;
    try {
      ptr = neuron_core.hbm().allocate(size);
    } catch (const nrtsim::OutOfMemoryError&) {
      // Give the cache back to HBM and try once more before reporting.
      state.stats.num_alloc_retries += 1;
      release_cached(neuron_core, state);
      try {
        ptr = neuron_core.hbm().allocate(size);
      } catch (const nrtsim::OutOfMemoryError& error) {
        state.stats.num_ooms += 1;
        // Report what the caller asked for, not the size class.
        rethrow_runtime_error(nrtsim::OutOfMemoryError(error.device(), nbytes, error.free_bytes(),
                                                       error.capacity(), error.cause()));
      }
    }
    state.stats.num_device_alloc += 1;
    increase(state.stats.segment, size, 1);
    increase(state.stats.reserved_bytes, size, size);
    return ptr;
  }

  static void release_cached(nrtsim::NeuronCore& neuron_core, DeviceState& state) {
    for (auto& [size, ptr] : state.cached) {
      neuron_core.hbm().free(ptr);
      state.stats.num_device_free += 1;
      decrease(state.stats.segment, size, 1);
      decrease(state.stats.reserved_bytes, size, size);
    }
    state.cached.clear();
  }

  // Re-entrant, as the allocator's lock has always been; a spin lock because a warm allocate or
  // free holds it for a few map operations.
  nrtsim::RecursiveSpinLock mutex_;
  LiveBlocks blocks_;
  std::vector<std::unique_ptr<DeviceState>> states_;
  SpareNodes<LiveBlocks> spare_live_;
  SpareNodes<CachedBlocks> spare_cached_;
};

// Never destroyed: tensors owned by other static objects are freed during exit.
NeuronCachingAllocator* const g_allocator = new NeuronCachingAllocator();

void NeuronCachingAllocator::free_ptr(void* ptr) {
  if (ptr != nullptr) g_allocator->free(ptr);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, g_allocator);

}  // namespace

c10::DeviceAllocator& caching_allocator() { return *g_allocator; }

bool is_caching_allocator_block(void* ptr) { return ptr != nullptr && g_allocator->owns(ptr); }

}  // namespace torch_neuronx
