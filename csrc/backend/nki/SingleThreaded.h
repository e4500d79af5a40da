// ATen's intra-op thread count set to one on this thread for a scope: the NKI interpreter's
// tile-sized GEMMs (at most 128 x 512 x 128) are too small for a split over threads to pay for
// waking the OpenMP workers. at::set_num_threads sets the calling thread's OpenMP and MKL counts.
// (Compiled programs do not use it: they run with the caller's threads, as Inductor's CPU code
// does; on a quiet 2-core host two threads ran the one-token decode step 25% faster than one.)
#pragma once

#include <ATen/Parallel.h>

namespace torch_neuronx {

class SingleThreaded {
 public:
  explicit SingleThreaded(bool on)
      : saved_(on && !at::in_parallel_region() ? at::get_num_threads() : 1) {
    if (saved_ != 1) at::set_num_threads(1);
    ++depth_;
  }
  ~SingleThreaded() {
    --depth_;
    if (saved_ != 1) at::set_num_threads(saved_);
  }
  // Whether this thread is inside a SingleThreaded scope (a run's calling thread is; the
  // interpreter's partition workers, which torch did not start, are not).
  static bool active() { return depth_ > 0; }
  SingleThreaded(const SingleThreaded&) = delete;
  SingleThreaded& operator=(const SingleThreaded&) = delete;

 private:
  int saved_;
  static inline thread_local int depth_ = 0;
};

}  // namespace torch_neuronx
