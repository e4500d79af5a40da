#include "runtime/transport/Health.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>

#include "runtime/Error.h"

namespace nrtsim::transport {

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, long ns) {
  timespec ts{0, ns};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
            0);
}

bool process_ended(int pid) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

void Health::fail(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

bool Health::aborted() const {
  return group_.header().aborted.load(std::memory_order_acquire) != 0;
}

void Health::abort(const std::string& reason) {
  GroupHeader& h = group_.header();
  uint32_t expected = 0;
  if (h.aborted.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    h.abort_rank = group_.rank();
    std::snprintf(h.abort_reason, sizeof(h.abort_reason), "%s", reason.c_str());
    h.aborted.store(2, std::memory_order_release);
  }
  // Wake every waiter, whatever word it sleeps on.
  h.doorbell.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(h.doorbell);
  for (int r = 0; r < group_.size(); ++r) {
    group_.control(r).doorbell.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(group_.control(r).doorbell);
  }
}

void Health::abort_and_fail(const std::string& reason) {
  abort(reason);
  fail(reason);
}

void Health::raise_if_aborted(const char* what) {
  GroupHeader& h = group_.header();
  if (h.aborted.load(std::memory_order_acquire) == 0) return;
  // The aborting rank marks the group (1) before it writes its reason (2): wait for the reason,
  // by time, not by a count of yields, which a loaded host can use up before the aborting rank
  // runs again (the reason then read empty). A rank killed between the two leaves it empty.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (h.aborted.load(std::memory_order_acquire) != 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  fail(std::string(what) + " on rank " + std::to_string(group_.rank()) +
       " failed: the group was aborted by rank " + std::to_string(h.abort_rank) + ": " +
       h.abort_reason + " (an aborted group takes no more calls: destroy it and create a new one)");
}

void Health::check(const char* what, std::chrono::steady_clock::time_point start,
                   const Awaited& awaited) {
  raise_if_aborted(what);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_watch_ > std::chrono::milliseconds(100)) {
    last_watch_ = now;
    // Only the ranks still awaited matter: a peer that passed this point and then exited
    // normally is no fault. It may have done both since `awaited` was read, so an exited rank
    // is blamed only if it is still awaited when read again: its progress is final by then.
    const std::vector<int> late = awaited ? awaited() : std::vector<int>{};
    for (int r : late) {
      if (r == group_.rank() || !ended(r)) continue;
      const std::vector<int> again = awaited();
      if (std::find(again.begin(), again.end(), r) == again.end()) continue;
      const std::string reason = "rank " + std::to_string(r) + " (pid " +
                                 std::to_string(pid_of(r)) +
                                 ") exited while the group still needed it during " + what +
                                 " (its own output says why; a rank that has finished must still "
                                 "call every collective its group calls, up to "
                                 "destroy_process_group)";
      abort(reason);
      fail(std::string(what) + " on rank " + std::to_string(group_.rank()) + " failed: " + reason);
    }
  }
  if (now - start > timeout_) {
    abort_and_fail(std::string(what) + " timed out after " + std::to_string(timeout_.count()) +
                   " ms on rank " + std::to_string(group_.rank()) + " waiting for rank(s) " +
                   rank_list(awaited ? awaited() : std::vector<int>{}) +
                   " (a peer is hung, or the ranks called collectives in different orders; if "
                   "the peer is only slow, give the group a longer timeout: "
                   "init_process_group(timeout=...) or new_group(timeout=...))");
  }
}

}  // namespace nrtsim::transport
