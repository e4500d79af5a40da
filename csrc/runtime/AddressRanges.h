// Disjoint [start, start + size) address ranges, for "which live allocation does this address fall
// in". Not synchronised: owners lock around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

namespace nrtsim {

class AddressRanges {
 public:
  void insert(const void* start, size_t size) { ranges_.emplace(address(start), size); }

  // Removes the range that starts at `start`; its size, or nullopt when none starts there.
  std::optional<size_t> erase(const void* start) {
    auto it = ranges_.find(address(start));
    if (it == ranges_.end()) return std::nullopt;
    const size_t size = it->second;
    ranges_.erase(it);
    return size;
  }

  // True when all of [ptr, ptr + bytes) lies inside one range.
  bool contains(const void* ptr, size_t bytes = 1) const {
    const uintptr_t a = address(ptr);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return false;
    --it;
    const uintptr_t end = it->first + it->second;
    return a < end && bytes <= end - a;
  }

  // The range holding `ptr` (its start and size), or nullopt.
  std::optional<std::pair<const void*, size_t>> find(const void* ptr) const {
    const uintptr_t a = address(ptr);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return std::nullopt;
    --it;
    if (a - it->first >= it->second) return std::nullopt;
    return std::make_pair(reinterpret_cast<const void*>(it->first), it->second);
  }

  size_t size() const { return ranges_.size(); }

  template <class Fn>
  void for_each(Fn&& fn) const {  // fn(void* start, size_t size)
    for (const auto& [start, size] : ranges_) fn(reinterpret_cast<void*>(start), size);
  }

 private:
  static uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  std::map<uintptr_t, size_t> ranges_;
};

}  // namespace nrtsim
