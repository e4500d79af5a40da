#include "runtime/nki/PartitionWorkers.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

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

// NRTSIM_NKI_THREADS's count where it names one (> 0), else 0: automatic.
int configured_threads() {
  static const int threads = [] {
    int n = 0;
    if (const std::optional<int> own = env::int_value("NRTSIM_NKI_THREADS")) {
      if (*own > 0) n = std::min(*own, kMaxPartitionThreads);  // 0: automatic
    }
    return n;
  }();
  return threads;
}

// The cores this process may run on.
int cores() {
  static const int n = [] {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return n;
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
  // `adapt`: use only the cores other processes leave free, and run alone for a while after a
  // worker lost its core in the middle of a range (the automatic thread count).
  bool run(int n, int threads, const std::function<void(int)>& task, bool adapt) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    const auto posted = std::chrono::steady_clock::now();
    if (adapt) {
      if (posted < alone_until_) return false;
      if (posted >= next_look_) {  // how many cores the other processes leave free, now and then
        next_look_ = posted + kLook;
        const int others = others_running(started_ - sleepers_.load(std::memory_order_relaxed));
        free_cores_ = others < 0 ? kMaxPartitionThreads : cores() - others;
      }
      threads = std::min(threads, free_cores_);
      if (threads < 2) return false;
    }
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
    keep_off_caller_cpu();
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
    const auto own = std::chrono::steady_clock::now();
    if (!spin_until([&] { return done_.load(std::memory_order_acquire) == n; })) {
      std::unique_lock<std::mutex> lock(mu_);
      caller_waits_.store(true, std::memory_order_seq_cst);
      finished_.wait(lock, [&] { return done_.load(std::memory_order_seq_cst) == n; });
      caller_waits_.store(false, std::memory_order_relaxed);
    }
    // A worker that kept the caller waiting far longer than the caller's own share took lost its
    // core in the middle of a range (the host has more runnable threads than cores): for a while
    // the caller runs instructions alone, as a range it cannot take over would hold each one up
    // by the system's time slice (milliseconds).
    const auto end = std::chrono::steady_clock::now();
    if (adapt && end - own > 4 * (own - posted) + kStall) alone_until_ = end + kAlone;
    task_ = nullptr;
    return true;
  }

 private:
  // How long the caller waiting for the last ranges spins before it sleeps, and a worker
  // waiting for the next instruction: longer, to span the stretches of small instructions
  // between a kernel's large ones (flash attention's 0.4-0.5 ms of transposes and small matmuls
  // between its score tiles; with 200 us the worker slept, and was woken, for 2 of every 3 split
  // instructions). Its core is not the caller's (keep_off_caller_cpu), so the spin takes
  // nothing from the kernel's own thread.
  static constexpr std::chrono::microseconds kSpin{200};
  static constexpr std::chrono::microseconds kWorkerSpin{1000};
  // A wait for the workers' last ranges longer than this (and than four times the caller's own
  // share) means a worker lost its core; the caller then runs alone for kAlone.
  static constexpr std::chrono::microseconds kStall{500};
  static constexpr std::chrono::milliseconds kAlone{50};
  // How often the caller looks at the host's runnable threads (/proc/loadavg: 2.3-2.5 us a
  // read on the host measured, so 0.05 % of a thread's time at this rate).
  static constexpr std::chrono::milliseconds kLook{5};

  // Threads running or ready to run on the host now, less this caller and `awake` workers of
  // its own (spinning ones count as running): the fourth field of /proc/loadavg, "running/total".
  // -1 where it cannot be read.
  static int others_running(int awake) {
    const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[128];
    const ssize_t got = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (got <= 0) return -1;
    buf[got] = '\0';
    const char* p = buf;
    for (int field = 0; field < 3 && p; ++field) {
      p = std::strchr(p, ' ');
      if (p) ++p;
    }
    if (!p) return -1;
    const long running = std::strtol(p, nullptr, 10);
    return std::max(0, static_cast<int>(running) - 1 - awake);
  }

  // The workers may run on any of the process's cores but the caller's own. A worker woken by
  // the caller is otherwise placed on the caller's core as often as not (the scheduler's
  // wake-affine choice: measured on the 2-core host, 93 % of the worker's ranges of flash
  // attention ran on the core the caller posted from), where it takes the caller's ranges while
  // the caller waits for a time slice, and its spin then takes the caller's core: two threads
  // ran slower than one. Set again only when the caller's core changes (one system call per
  // worker; sched_getcpu itself reads the core without one).
  void keep_off_caller_cpu() {
    const int cpu = sched_getcpu();
    if (cpu < 0 || cpu == kept_off_) return;
    kept_off_ = cpu;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    const bool others = CPU_ISSET(cpu, &set) && CPU_COUNT(&set) > 1;
    if (others) CPU_CLR(cpu, &set);  // else (one core, or the caller outside the set) any core
    for (int id = 1; id <= started_; ++id) {
      const int tid = tids_[id].load(std::memory_order_acquire);
      if (tid > 0) sched_setaffinity(tid, sizeof set, &set);
      else kept_off_ = -1;  // not started yet: again at the next instruction
    }
  }

  static uint64_t pack(uint32_t number, uint32_t next, uint32_t end) {
    return static_cast<uint64_t>(number) << 32 | static_cast<uint64_t>(next) << 16 | end;
  }
  static uint32_t number_of(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
  static uint32_t next_of(uint64_t w) { return static_cast<uint32_t>(w >> 16) & 0xffffu; }
  static uint32_t end_of(uint64_t w) { return static_cast<uint32_t>(w) & 0xffffu; }

  template <typename Ready>
  static bool spin_until(Ready ready, std::chrono::microseconds spin = kSpin) {
    const auto until = std::chrono::steady_clock::now() + spin;
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
    tids_[id].store(static_cast<int>(::gettid()), std::memory_order_release);
    uint32_t seen = current_.load(std::memory_order_acquire);
    for (;;) {
      if (!spin_until([&] { return current_.load(std::memory_order_acquire) != seen; },
                      kWorkerSpin)) {
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
  std::chrono::steady_clock::time_point alone_until_{};  // these four under run_mu_
  std::chrono::steady_clock::time_point next_look_{};
  int free_cores_ = 1;
  int started_ = 0;    // worker threads started (ids 1 .. started_)
  int kept_off_ = -1;  // the core the workers are kept off (the caller's at the last look)
  std::atomic<int> tids_[kMaxPartitionThreads] = {};  // the workers' thread ids (0: not yet)
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
  if (forced > 0) return forced;
  const int configured = configured_threads();
  return configured > 0 ? configured : std::min(cores(), kAutoPartitionThreads);
}

bool partition_threads_automatic() {
  return g_override.load(std::memory_order_relaxed) == 0 && configured_threads() == 0;
}

int set_partition_threads(int threads) {
  const int before = partition_threads();
  g_override.store(std::clamp(threads, 0, kMaxPartitionThreads), std::memory_order_relaxed);
  return before;
}

bool try_run_on_workers(int n, int threads, const std::function<void(int)>& task, bool adapt) {
  // (A block's word holds range numbers in 16 bits: more ranges run on the calling thread.)
  return n > 1 && n <= 0xffff && threads > 1 && pool().run(n, std::min(threads, n), task, adapt);
}

void run_on_workers(int n, int threads, const std::function<void(int)>& task, bool adapt) {
  if (!try_run_on_workers(n, threads, task, adapt)) {
    for (int r = 0; r < n; ++r) task(r);
  }
}

uint64_t split_instruction_count() { return g_splits.load(std::memory_order_relaxed); }
uint64_t worker_task_count() { return g_worker_ranges.load(std::memory_order_relaxed); }
void count_split_instruction() { g_splits.fetch_add(1, std::memory_order_relaxed); }

}  // namespace nrtsim::nki
