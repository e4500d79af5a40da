#include "runtime/nki/PartitionWorkers.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime/Env.h"

namespace nrtsim::nki {
namespace {

// One thread unless NRTSIM_NKI_THREADS asks for more. Splitting is opt-in: on the 2-core host
// it was measured on (docs/benchmarks.md, 2026-12-07 16:01 UTC, quiet) two threads made RoPE and
// cascaded_max faster but rope_hf 1.4-2.0x and conv1d 1.2-1.3x slower, with torch at one thread
// or two (not yet explained; a suspect: ranges claimed by whichever thread is free move a tile's
// partitions between the cores' caches from one instruction to the next), so no default count
// serves every kernel yet.
int configured_threads() {
  static const int threads = [] {
    int n = 1;
    if (const std::optional<int> own = env::int_value("NRTSIM_NKI_THREADS")) {
      if (*own > 0) n = *own;  // 0: the default
    }
    return std::clamp(n, 1, kMaxPartitionThreads);
  }();
  return threads;
}

std::atomic<int> g_override{0};
std::atomic<uint64_t> g_splits{0};
std::atomic<uint64_t> g_worker_ranges{0};

// Ranges are claimed, not assigned: the caller and each worker that wakes in time take the next
// unclaimed range until none is left. On a busy host a worker may not get a core for a while;
// the caller then computes its ranges too instead of waiting for it, so a split instruction costs
// little more than an unsplit one even with no core free. Idle workers wait on a condition
// variable (no spinning: on a host with as many cores as threads, a spinning idle worker takes
// the core that the calling thread needs).
class Pool {
 public:
  // False when another caller holds the workers (the caller then runs the tasks itself).
  bool run(int n, int threads, const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A thread the system refuses to start leaves the work to those there are.
      try {
        while (static_cast<int>(threads_.size()) < threads - 1) {
          threads_.emplace_back([this] { work(); });
          threads_.back().detach();
        }
      } catch (const std::system_error&) {
      }
      task_ = &task;
      count_ = n;
      next_.store(0, std::memory_order_relaxed);
      open_ = true;
      wanted_ = std::min(threads - 1, static_cast<int>(threads_.size()));
      ++generation_;
    }
    wake_.notify_all();
    claim(task, n);
    std::unique_lock<std::mutex> lock(mu_);
    open_ = false;  // a worker waking from now on finds nothing to do
    left_.wait(lock, [&] { return joined_ == 0; });
    task_ = nullptr;
    return true;
  }

 private:
  // Returns how many tasks this thread ran.
  int claim(const std::function<void(int)>& task, int n) {
    int ran = 0;
    for (int r; (r = next_.fetch_add(1, std::memory_order_relaxed)) < n; ++ran) task(r);
    return ran;
  }

  void work() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (!open_ || wanted_ == 0) continue;
      --wanted_;
      ++joined_;
      const std::function<void(int)>& task = *task_;
      const int n = count_;
      lock.unlock();
      g_worker_ranges.fetch_add(claim(task, n), std::memory_order_relaxed);
      lock.lock();
      if (--joined_ == 0) left_.notify_one();
    }
  }

  std::mutex run_mu_;  // one caller's instruction at a time
  std::mutex mu_;
  std::condition_variable wake_, left_;
  std::vector<std::thread> threads_;  // detached: they live as long as the process
  const std::function<void(int)>* task_ = nullptr;
  int count_ = 0;
  std::atomic<int> next_{0};
  bool open_ = false;
  int wanted_ = 0;  // workers still to join this instruction
  int joined_ = 0;  // workers claiming its ranges now
  uint64_t generation_ = 0;
};

// The pool of this process: a child made by fork() has none of its parent's worker threads, so
// it starts a pool of its own (the parent's is left as it is, never used again).
Pool& pool() {
  static std::mutex mu;
  static Pool* current = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(mu);
  const pid_t me = getpid();
  if (current == nullptr || owner != me) {
    current = new Pool();  // never deleted: detached workers wait on it until the process ends
    owner = me;
  }
  return *current;
}

}  // namespace

int partition_threads() {
  const int forced = g_override.load(std::memory_order_relaxed);
  return forced > 0 ? forced : configured_threads();
}

int set_partition_threads(int threads) {
  const int before = partition_threads();
  g_override.store(std::clamp(threads, 0, kMaxPartitionThreads), std::memory_order_relaxed);
  return before;
}

void run_on_workers(int n, int threads, const std::function<void(int)>& task) {
  if (n <= 1 || threads <= 1 || !pool().run(n, std::min(threads, n), task)) {
    for (int r = 0; r < n; ++r) task(r);
  }
}

uint64_t split_instruction_count() { return g_splits.load(std::memory_order_relaxed); }
uint64_t worker_task_count() { return g_worker_ranges.load(std::memory_order_relaxed); }
void count_split_instruction() { g_splits.fetch_add(1, std::memory_order_relaxed); }

}  // namespace nrtsim::nki
