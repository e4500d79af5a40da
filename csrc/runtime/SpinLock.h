// A lock for critical sections of a few dozen instructions on the launch path (the simulated
// clock, the kernel totals): uncontended it is a single atomic exchange, several times cheaper
// than a pthread mutex; contended it yields instead of burning the core.
#pragma once

#include <atomic>
#include <thread>

namespace nrtsim {

class SpinLock {
 public:
  void lock() noexcept {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace nrtsim
