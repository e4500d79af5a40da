// The bridge from an ATen op seen by a trace (fake or meta tensors: shapes, no data) to the work
// a NeuronCore launch of it would record: the op-work table's answer (core/OpWork.h), the same
// table the eager kernels and compiled graphs ask, so an op's work has one definition whether it
// runs, is compiled or is only traced.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <vector>

#include "backend/core/OpWork.h"
#include "runtime/TensorTiles.h"
#include "runtime/cost/Projection.h"

namespace torch_neuronx::estimate {

struct TracedWork {
  nrtsim::cost::TracedOp op;
  WorkSource source = WorkSource::kDefault;
};

// `arguments`: the op's arguments in schema order (as a boxed kernel sees them); `outputs`: the
// tensors it produced or wrote. Tile occupancy is counted with default_tensor_tiles()
// (core/OpWork.h).
TracedWork traced_work(const c10::OperatorHandle& op, const torch::jit::Stack& arguments,
                       const std::vector<at::Tensor>& outputs);

// Tensor-engine FLOPs that left [.., M, K] x right [.., K, N] occupies with
// default_tensor_tiles().
uint64_t matmul_tile_ops(int64_t batch, int64_t m, int64_t k, int64_t n);

}  // namespace torch_neuronx::estimate
