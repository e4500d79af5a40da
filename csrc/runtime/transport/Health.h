// Health and abort of a group: every wait of the transport goes through here, so that a dead,
// hung or aborted peer becomes an Error naming the rank, never a hang.
//
// - A dead peer: the processes of the ranks still awaited are watched (every 100 ms of waiting);
//   one that has exited fails the wait within about that long.
// - A hung peer: the group's timeout bounds every wait; the message names the late ranks.
// - Abort: any rank may mark the group aborted (with its reason, in the segment's header); every
//   rank's current and later waits then fail with that reason.
// A failure aborts the group, so the other ranks learn of it at once rather than at their
// timeout.
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/transport/GroupSegment.h"

namespace nrtsim::transport {

// A futex on a word of the shared segment: wait (at most `ns`) while it still holds `expected`,
// and wake every waiter.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, long ns);
void futex_wake(std::atomic<uint32_t>& word);

// Whether process `pid` has ended (gone, or a zombie its parent has not reaped yet).
bool process_ended(int pid);

class Health {
 public:
  using Awaited = std::function<std::vector<int>()>;

  Health(GroupSegment& group, std::chrono::milliseconds timeout)
      : group_(group), timeout_(timeout) {}

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // How long a wait hands the core over (sched_yield) before it sleeps. When ranks outnumber
  // cores, the rank that would end the wait is often runnable on this very core: a yield runs
  // it at once, where a futex sleep costs a sleep, a wake-up from another core and, when both
  // ranks of a core sleep, the core's idle exit; and the wake-ups are what lets the scheduler
  // stack all ranks on one core (it places a wakee next to its waker), where a collective takes
  // the sum of the ranks' CPU time. A whole collective of a MiB takes under a millisecond, so
  // with 1 ms of yielding its waits do not sleep. On the 2-core host with 4 ranks, against
  // 50 us (docs/benchmarks.md, "Waits that yield for 1 ms"): all_gather 1 MiB 337-535 against
  // 665-753 us, 256 KiB 68-216 against 299-541 us, reduce_scatter 256 KiB 96-184 against
  // 306-360 us, all_reduce 1 MiB 611-1385 against 792-941 us (seven runs each); 16 ranks on the
  // 2 cores no different. A yield gives the core to any other runnable task, so other jobs keep
  // their share; a longer wait sleeps.
  static constexpr std::chrono::microseconds kYieldFor{1000};

  // Returns once ready() holds. Spins briefly, yields the core for up to kYieldFor, then sleeps
  // on `word` (which whoever makes ready() true bumps and wakes), checking between sleeps: an
  // abort by any rank, an awaited rank that has exited, the timeout. `awaited` lists the ranks
  // still awaited (called again before a rank that has exited is blamed: it may have arrived,
  // moved on and exited since).
  template <class Ready>
  void wait_for(Ready&& ready, const Awaited& awaited, const char* what,
                std::atomic<uint32_t>& word) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return;
      __builtin_ia32_pause();
    }
    const auto start = std::chrono::steady_clock::now();
    do {
      if (ready()) return;
      sched_yield();
    } while (std::chrono::steady_clock::now() - start < kYieldFor);
    while (true) {
      const uint32_t seen = word.load(std::memory_order_acquire);
      if (ready()) return;
      check(what, start, awaited);
      futex_wait(word, seen, 2'000'000);
    }
  }

  // Throws (and aborts the group) on an abort by any rank, a dead awaited rank, or a wait that
  // began at `start` and has lasted past the timeout.
  void check(const char* what, std::chrono::steady_clock::time_point start,
             const Awaited& awaited);
  // Throws the abort's reason if some rank aborted the group.
  void raise_if_aborted(const char* what);

  // Makes every rank's current and future waits fail with `reason` (this rank named as the
  // source). Idempotent: the first reason stays.
  void abort(const std::string& reason);
  bool aborted() const;
  // Aborts the group with `reason` and throws it.
  [[noreturn]] void abort_and_fail(const std::string& reason);
  [[noreturn]] static void fail(const std::string& message);

  int pid_of(int rank) const { return group_.control(rank).pid.load(std::memory_order_acquire); }
  bool ended(int rank) const { return process_ended(pid_of(rank)); }

 private:
  GroupSegment& group_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point last_watch_{};
};

std::string rank_list(const std::vector<int>& ranks);

}  // namespace nrtsim::transport
