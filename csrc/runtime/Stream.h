// An in-order execution queue on one NeuronCore.
//
// nrtsim executes work on the thread that submits it, so a submission has finished when submit()
// returns. The stream still keeps the books of an asynchronous queue (a ticket per submission and
// the last completed ticket) and serialises submissions from different host threads, so events,
// queries and waits have exactly the semantics they would have on a queue that runs ahead. On the
// simulated clock the stream has a cursor: where its last launch ended in modelled device time.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "runtime/SpinLock.h"

namespace nrtsim {

class NeuronCore;

class Stream {
 public:
  Stream(NeuronCore& core, uint32_t id, int priority);
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  NeuronCore& core() const { return core_; }
  int device_index() const { return device_index_; }
  uint32_t id() const { return id_; }
  int priority() const { return priority_; }  // 0 normal, negative = higher priority

  // Runs `work` after everything submitted before it. An exception from `work` propagates to the
  // caller; the submission still counts as completed so that the stream stays usable.
  template <class Work>
  void submit(Work&& work) {
    std::lock_guard<RecursiveSpinLock> lock(mutex_);
    submitted_.fetch_add(1, std::memory_order_relaxed);
    ++depth_;
    // Work nested inside other work on this stream (same thread, lock held) completes with the
    // outermost submission: completing it alone would mark the enclosing, still running ticket
    // done, and the enclosing one would then move `completed` back behind the nested ticket.
    struct Complete {
      Stream& stream;
      ~Complete() {
        if (--stream.depth_ == 0) {
          stream.completed_.store(stream.submitted_.load(std::memory_order_relaxed),
                                  std::memory_order_release);
        }
      }
    } complete{*this};
    work();
  }

  uint64_t submitted() const { return submitted_.load(std::memory_order_acquire); }
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  bool reached(uint64_t ticket) const { return completed() >= ticket; }
  bool query() const { return completed() >= submitted(); }
  // Returns once all work submitted before the call has completed.
  void synchronize() { std::lock_guard<RecursiveSpinLock> lock(mutex_); }

  // Modelled device time at which this stream's last launch ends. Read and moved only inside
  // submit() (the stream's lock is held there).
  double& sim_cursor_ns() { return sim_cursor_ns_; }
  // Makes later work on this stream start no earlier than `time_ns` (a wait on an event).
  void wait_until_ns(double time_ns) {
    std::lock_guard<RecursiveSpinLock> lock(mutex_);
    sim_cursor_ns_ = std::max(sim_cursor_ns_, time_ns);
  }

 private:
  NeuronCore& core_;
  const int device_index_;
  const uint32_t id_;
  const int priority_;
  // Recursive: a kernel may itself enqueue onto its stream (e.g. a copy inside a fallback). A spin
  // lock: held for one launch at a time, and uncontended on the hot path.
  RecursiveSpinLock mutex_;
  std::atomic<uint64_t> submitted_{0};
  std::atomic<uint64_t> completed_{0};
  uint32_t depth_ = 0;  // submissions running on the thread that holds mutex_
  double sim_cursor_ns_ = 0;
};

}  // namespace nrtsim
