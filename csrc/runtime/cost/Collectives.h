// What one collective costs over the links its group spans, with the algorithm the vendor's
// library picks by message size: Neuron's runtime (mesh, recursive doubling-halving, rings on
// the torus), NCCL (ring, or NVLink SHARP where the switch reduces) and TensorRT-LLM's one-shot
// and two-shot all-reduce on NVSwitch; rings between instances over EFA or InfiniBand.
#pragma once

#include <string>

#include "runtime/cost/CostData.h"
#include "runtime/cost/RankModel.h"
#include "runtime/cost/TracedOp.h"

namespace nrtsim::cost {

// A group of `ranks` ranks, `stride` apart in the rank order. `bytes`: the full buffer (all-reduce
// in/out, all-gather output, reduce-scatter input, all-to-all send of one rank, the sent
// message). `inference`: a serving engine's all-reduce (TensorRT-LLM's one-shot and two-shot
// kernels on NVSwitch below their size limits) rather than a training framework's (NCCL only).
// Writes the links and algorithm it used to `over` when given.
double collective_ns(CollectiveKind kind, double bytes, int ranks, int stride,
                     const InstanceSpec& instance, const CostData& data, const RankModel& rank,
                     std::string* over = nullptr, bool inference = false);

}  // namespace nrtsim::cost
