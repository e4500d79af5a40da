// The bridge from an ATen op seen by a trace (fake or meta tensors: shapes, no data) to the work
// a NeuronCore launch of it would record: the same FLOP models (FlopModels.h), the same cost
// builder (Cost.h) and the same op families (BoxedHostMath.h) the eager kernels use, so an op's
// work has one definition whether it runs or is only traced.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>
#include <vector>

#include "runtime/cost/Projection.h"

namespace torch_neuronx::estimate {

// How the work was derived: an op family's model, a dedicated kernel's model, a copy, or the
// default for ops neuron has no model of (one Vector-engine pass over the largest tensor).
enum class WorkSource { kFamily, kKernel, kCopy, kDefault };

struct TracedWork {
  nrtsim::cost::TracedOp op;
  WorkSource source = WorkSource::kDefault;
};

// `arguments`: the op's arguments in schema order (as a boxed kernel sees them); `outputs`: the
// tensors it produced or wrote.
TracedWork traced_work(const c10::OperatorHandle& op, const torch::jit::Stack& arguments,
                       const std::vector<at::Tensor>& outputs);

// Tensor-engine FLOPs that left [.., M, K] x right [.., K, N] occupies on a NeuronCore: whole
// tiles of K <= 128 partitions x <= 128 stationary columns x <= 512 moving columns, a moving tile
// narrower than 64 columns costing 64 (the MM initiation interval), with the cheaper of the two
// operand-to-role assignments.
uint64_t matmul_tile_ops(int64_t batch, int64_t m, int64_t k, int64_t n);

}  // namespace torch_neuronx::estimate
