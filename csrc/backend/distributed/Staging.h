// From c10d's tensors to the transport's buffers: the checks every collective makes on its
// tensors, the contiguous copies it works on (and copies back), element types and reduce ops in
// the transport's terms, and the scaling AVG and PREMUL_SUM apply after the sum.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <string>
#include <utility>

#include "runtime/Error.h"
#include "runtime/transport/Reduce.h"

namespace torch_neuronx::distributed {

namespace tp = nrtsim::transport;

// torch.distributed.DistBackendError, naming the backend.
[[noreturn]] void dist_error(const std::string& message);

// Runs `fn`; a transport error becomes DistBackendError.
template <class Fn>
decltype(auto) transport_call(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const nrtsim::Error& e) {
    dist_error(std::string("neuron process group: ") + e.what());
  }
}

// A CPU tensor over the same bytes (neuron memory is host memory); CPU tensors as they are.
at::Tensor host(const at::Tensor& t);
inline void* ptr(const at::Tensor& t) { return t.data_ptr(); }
inline size_t nbytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}
// A flat CPU byte view of a contiguous tensor: what Gloo moves between hosts, any element type.
at::Tensor host_bytes(const at::Tensor& t);

// The transport's element type of `t`; refuses types it cannot move, naming `op`.
tp::DType dtype_of(const at::Tensor& t, const char* op);

// The transport's reduction for a c10d reduce op (AVG and PREMUL_SUM sum, and are scaled
// afterwards by finish_reduction).
tp::ReduceOp reduce_op_of(const c10d::ReduceOp& op, const at::Tensor& t, const char* name);
// After summing: AVG divides by the group size (integers truncated toward zero, as c10d's NCCL
// backend and TorchNeuron do), PREMUL_SUM multiplies by its factor (scaling the sum instead of
// every input: the same value up to one rounding, one pass instead of N).
// Whether `op` leaves work after the transport's reduction (AVG divides, PREMUL_SUM scales).
inline bool needs_finishing(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::AVG || op.op_ == c10d::ReduceOp::PREMUL_SUM;
}
void finish_reduction(const c10d::ReduceOp& op, at::Tensor& out, int size);

// A contiguous tensor to work on, and whether results must be copied back to the original.
struct Staged {
  at::Tensor original;
  at::Tensor work;
  bool copy_back() const { return !work.is_same(original); }
};
// Dense (strided) neuron or CPU tensors only, named in the error.
void check_dense(const at::Tensor& t, const char* op);
Staged stage(const at::Tensor& t, const char* op);
void unstage(Staged& s);

}  // namespace torch_neuronx::distributed
