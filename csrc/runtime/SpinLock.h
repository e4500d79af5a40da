// Locks for the launch path, where a pthread mutex's lock and unlock were a measurable share of a
// small op's cost. Uncontended each is a single atomic operation.
//
// SpinLock guards critical sections of a few dozen instructions (the simulated clock, the kernel
// totals); contended, it yields.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
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

// The same, re-entrant: the owning thread may lock again (a launch nested in a launch on the same
// stream, such as a copy inside a CPU fallback).
class RecursiveSpinLock {
 public:
  void lock() noexcept {
    const std::thread::id me = std::this_thread::get_id();
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return;
    }
    std::thread::id none{};
    // A stream may be held for a whole kernel (a large GEMM): after a short spin, a waiter
    // sleeps between tries instead of taking the core from the thread it waits for.
    for (int tries = 0; !owner_.compare_exchange_weak(none, me, std::memory_order_acquire,
                                                      std::memory_order_relaxed);
         ++tries) {
      none = std::thread::id{};
      if (tries < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    depth_ = 1;
  }
  void unlock() noexcept {
    if (--depth_ == 0) owner_.store(std::thread::id{}, std::memory_order_release);
  }

 private:
  std::atomic<std::thread::id> owner_{};
  uint32_t depth_ = 0;  // touched only by the owner
};

}  // namespace nrtsim
