#include "runtime/nki/PartitionWorkers.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

// How the ranges are shared. Each participating thread (the caller and threads - 1 workers) has
// a home block of consecutive ranges, the same partitions for every instruction with the same
// range count, so a tile's partitions stay in the cache of the core that wrote them; a thread
// that finishes its block takes ranges from the back of another's (the owner works from the
// front), so a worker that has not got a core leaves its share to the others. Each block is one
// word (instruction number, next range, end of block) changed by compare-and-swap: a thread that
// wakes late for an instruction already finished finds the number changed and takes nothing.
//
// Hand-off: an idle worker spins for a while before it sleeps, and the caller spins while the
// last ranges finish, because waking a sleeping thread on the host measured costs tens of
// microseconds (docs/nki.md, "Instructions over several threads"), as much as the ranges of a
// large instruction take; a kernel issues its large instructions back to back, so the workers
// are still spinning when the next one comes. Past the spin they sleep on a condition variable,
// so an idle process takes no core.
class Pool {
 public:
  // False when another caller holds the workers (the caller then runs the tasks itself).
  bool run(int n, int threads, const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    // A thread the system refuses to start leaves the work to those there are.
    try {
      while (started_ < threads - 1 && started_ < kMaxPartitionThreads - 1) {
        const int id = started_ + 1;
        std::thread([this, id] { work(id); }).detach();
        ++started_;
      }
    } catch (const std::system_error&) {
    }
    const int members = std::min({threads, started_ + 1, n});
    const uint32_t number = ++number_;
    task_ = &task;
    count_ = n;
    members_.store(members, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    for (int t = 0; t < members; ++t) {
      const auto lo = static_cast<uint32_t>(static_cast<int64_t>(n) * t / members);
      const auto hi = static_cast<uint32_t>(static_cast<int64_t>(n) * (t + 1) / members);
      blocks_[t].word.store(pack(number, lo, hi), std::memory_order_release);
    }
    current_.store(number, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(mu_); }
      wake_.notify_all();
    }
    take(0, number, members);
    // The caller returns only when every range has finished (a worker may still be in one).
    if (!spin_until([&] { return done_.load(std::memory_order_acquire) == n; })) {
      std::unique_lock<std::mutex> lock(mu_);
      caller_waits_.store(true, std::memory_order_seq_cst);
      finished_.wait(lock, [&] { return done_.load(std::memory_order_seq_cst) == n; });
      caller_waits_.store(false, std::memory_order_relaxed);
    }
    task_ = nullptr;
    return true;
  }

 private:
  // How long a thread spins before it sleeps (a worker waiting for the next instruction, the
  // caller waiting for the last ranges).
  static constexpr std::chrono::microseconds kSpin{200};

  static uint64_t pack(uint32_t number, uint32_t next, uint32_t end) {
    return static_cast<uint64_t>(number) << 32 | static_cast<uint64_t>(next) << 16 | end;
  }
  static uint32_t number_of(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
  static uint32_t next_of(uint64_t w) { return static_cast<uint32_t>(w >> 16) & 0xffffu; }
  static uint32_t end_of(uint64_t w) { return static_cast<uint32_t>(w) & 0xffffu; }

  template <typename Ready>
  static bool spin_until(Ready ready) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 1;; ++i) {
      if (ready()) return true;
      cpu_relax();
      if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return ready();
    }
  }

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  // Runs instruction `number`'s ranges from thread `home`'s block, front first, then from the
  // back of the other members' blocks. Returns how many ranges this thread ran.
  int take(int home, uint32_t number, int members) {
    int ran = 0;
    for (int k = 0; k < members; ++k) {
      const int b = (home + k) % members;
      std::atomic<uint64_t>& word = blocks_[b].word;
      uint64_t w = word.load(std::memory_order_acquire);
      for (;;) {
        if (number_of(w) != number) return ran;  // the instruction has finished
        const uint32_t next = next_of(w), end = end_of(w);
        if (next >= end) break;
        const uint32_t r = k == 0 ? next : end - 1;
        const uint64_t claimed = k == 0 ? pack(number, next + 1, end) : pack(number, next, end - 1);
        if (!word.compare_exchange_weak(w, claimed, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
          continue;
        }
        // A range claimed keeps the instruction (and task_) alive until it is counted done.
        (*task_)(static_cast<int>(r));
        ++ran;
        const int count = count_;  // read before the last range is counted: then it may change
        if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == count &&
            caller_waits_.load(std::memory_order_seq_cst)) {
          { std::lock_guard<std::mutex> lock(mu_); }
          finished_.notify_one();
        }
        w = word.load(std::memory_order_acquire);
      }
    }
    return ran;
  }

  void work(int id) {
    uint32_t seen = current_.load(std::memory_order_acquire);
    for (;;) {
      if (!spin_until([&] { return current_.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        wake_.wait(lock, [&] { return current_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = current_.load(std::memory_order_acquire);
      const int members = members_.load(std::memory_order_relaxed);
      if (id >= members) continue;
      g_worker_ranges.fetch_add(take(id, seen, members), std::memory_order_relaxed);
    }
  }

  struct alignas(64) Block {
    std::atomic<uint64_t> word{0};
  };

  std::mutex run_mu_;  // one caller's instruction at a time
  int started_ = 0;    // worker threads started (ids 1 .. started_)
  uint32_t number_ = 0;
  Block blocks_[kMaxPartitionThreads];
  alignas(64) std::atomic<uint32_t> current_{0};  // the instruction now running
  std::atomic<int> members_{0};
  const std::function<void(int)>* task_ = nullptr;
  int count_ = 0;  // ranges of the instruction now running
  alignas(64) std::atomic<int> done_{0};  // ranges finished
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_waits_{false};
  std::mutex mu_;
  std::condition_variable wake_, finished_;
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
