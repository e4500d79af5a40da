#include "backend/core/OpTracking.h"

#include <atomic>
#include <mutex>
#include <string_view>
#include <unordered_set>

#include "runtime/LaunchObserver.h"

namespace torch_neuronx {

namespace {

// Lists in first-seen order. Records carry interned names; other pointers with the same text are
// deduplicated by text under the lock. Each thread remembers the names it has already handed in
// (for the current generation of the lists), so the common case, an op seen before, costs one
// thread-local set lookup and no lock.
class OpTracker final : public nrtsim::LaunchObserver {
 public:
  void on_launch(const nrtsim::LaunchRecord& record) override {
    const bool fallback = record.kind == nrtsim::LaunchKind::kHostFallback;
    thread_local uint64_t generation = ~uint64_t{0};
    thread_local const char* last = nullptr;  // a loop of one op: no set lookup at all
    const uint64_t current = generation_.load(std::memory_order_acquire);
    if (record.op == last && !fallback && generation == current) return;
    thread_local std::unordered_set<const char*> seen_executed;
    thread_local std::unordered_set<const char*> seen_fallback;
    if (generation != current) {
      seen_executed.clear();
      seen_fallback.clear();
      generation = current;
    }
    auto& seen = fallback ? seen_fallback : seen_executed;
    if (!fallback) last = record.op;
    if (seen.count(record.op)) return;
    seen.insert(record.op);
    // Runtime-internal work (nrtsim::storage_resize, raw copies) is not an ATen op.
    if (!std::string_view(record.op).starts_with("aten::")) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (executed_set_.insert(record.op).second) executed_.push_back(record.op);
    if (fallback && fallback_set_.insert(record.op).second) fallbacks_.push_back(record.op);
  }

  std::vector<std::string> executed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return executed_;
  }
  std::vector<std::string> fallbacks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return fallbacks_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    executed_.clear();
    executed_set_.clear();
    fallbacks_.clear();
    fallback_set_.clear();
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }

 private:
  mutable std::mutex mutex_;
  std::atomic<uint64_t> generation_{0};
  std::vector<std::string> executed_;
  std::unordered_set<std::string> executed_set_;
  std::vector<std::string> fallbacks_;
  std::unordered_set<std::string> fallback_set_;
};

// Never destroyed, registered once: launches may happen during static destruction at exit.
OpTracker& tracker() {
  static OpTracker* instance = [] {
    auto* t = new OpTracker();
    nrtsim::add_observer(t);
    return t;
  }();
  return *instance;
}

[[maybe_unused]] const bool g_registered = [] {
  tracker();
  kernel_totals();
  return true;
}();

}  // namespace

nrtsim::LaunchTotals& kernel_totals() {
  static nrtsim::LaunchTotals* instance = [] {
    auto* t = new nrtsim::LaunchTotals();
    nrtsim::add_observer(t);
    return t;
  }();
  return *instance;
}

std::vector<std::string> fallback_ops() { return tracker().fallbacks(); }
std::vector<std::string> executed_ops() { return tracker().executed(); }
void clear_op_tracking() { tracker().clear(); }

}  // namespace torch_neuronx
