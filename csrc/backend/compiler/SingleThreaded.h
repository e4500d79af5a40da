// ATen's intra-op thread count set to one on this thread for a scope, for compiled code whose
// every operation is too small for a split over threads to pay for waking the OpenMP workers
// (a one-token decode step: matrix-vector products and attention over a short cache; the NKI
// interpreter's tile-sized GEMMs). Measured
// on the 2-core host: the decode step's attention, 262K FLOPs, took 23 us on one thread and 113 us
// on two while other jobs ran; the whole decode program ran in half the time on one thread.
// at::set_num_threads sets the calling thread's OpenMP and MKL counts (the NKI interpreter does
// the same around its tile-sized GEMMs).
#pragma once

#include <ATen/Parallel.h>

namespace torch_neuronx {

// Work (FLOPs, or elements for element-wise work) below which one operation runs on one thread:
// about 50-100 us of one core's arithmetic, which a two-way split would save about as much of as
// the workers' wake-up costs.
constexpr double kSingleThreadWork = 1 << 20;

class SingleThreaded {
 public:
  explicit SingleThreaded(bool on)
      : saved_(on && !at::in_parallel_region() ? at::get_num_threads() : 1) {
    if (saved_ != 1) at::set_num_threads(1);
  }
  ~SingleThreaded() {
    if (saved_ != 1) at::set_num_threads(saved_);
  }
  SingleThreaded(const SingleThreaded&) = delete;
  SingleThreaded& operator=(const SingleThreaded&) = delete;

 private:
  int saved_;
};

}  // namespace torch_neuronx
