// What one collective verb moves for one c10d call, in staged (contiguous) tensors: the unit the
// process group runs on this host's transport (ProcessGroupNeuron::exchange_on_host) or across
// hosts (HostSpan::exchange).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <vector>

#include "runtime/transport/Reduce.h"
#include "runtime/transport/Verb.h"

namespace torch_neuronx::distributed {

// What one verb moves, in staged (contiguous) tensors. `one`: the buffer of allreduce, reduce
// and broadcast; this rank's input of allgather and gather; its output of scatter and
// reduce_scatter. `parts`: one per group rank, the other side (allgather and gather outputs,
// scatter and reduce_scatter inputs, all-to-all receives), empty on ranks without it (a
// gather's or scatter's non-roots). `whole`: the parts as one contiguous tensor, when they
// are its consecutive pieces. All-to-all's sends are `sends` / `sends_whole`.
struct Exchange {
  nrtsim::transport::Verb verb = nrtsim::transport::Verb::kBarrier;
  int root = -1;
  nrtsim::transport::DType dtype = nrtsim::transport::DType::kOpaque1;
  nrtsim::transport::ReduceOp op = nrtsim::transport::ReduceOp::kSum;
  const c10d::ReduceOp* reduce = nullptr;  // AVG / PREMUL_SUM are finished after the sum
  at::Tensor one;
  std::vector<at::Tensor> parts;
  at::Tensor whole;
  std::vector<at::Tensor> sends;
  at::Tensor sends_whole;
};

}  // namespace torch_neuronx::distributed
