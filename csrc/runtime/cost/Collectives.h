// What one collective of a parallel layout costs: the estimate states it as the traffic a process
// group would report (CollectiveTraffic: the bytes one rank moves over the instance's links and
// between instances, the group's members per chip, the passes) and the runtime's link model
// prices it (LinkModel.h, CoreLinks::collective_ns), the rule and the data the simulated clock
// prices an eager collective with. Neuron's runtime's algorithms by size (mesh, recursive
// doubling-halving, KangaRing or ring), NCCL's (ring, NVLink SHARP) and TensorRT-LLM's one-shot
// and two-shot all-reduce on NVSwitch, rings between instances over EFA or InfiniBand: all there.
#pragma once

#include <string>

#include "runtime/CollectiveTraffic.h"
#include "runtime/LinkModel.h"
#include "runtime/cost/CostData.h"
#include "runtime/cost/RankModel.h"
#include "runtime/cost/TracedOp.h"

namespace nrtsim::cost {

// A group of `ranks` ranks, `stride` apart in the rank order. `bytes`: the full buffer (all-reduce
// in/out, all-gather output, reduce-scatter input, all-to-all send of one rank, the sent
// message). `inference`: a serving engine's all-reduce (TensorRT-LLM's one-shot and two-shot
// kernels on NVSwitch below their size limits) rather than a training framework's (NCCL only).

// What one rank of the group moves, in the terms a process group reports (a group of one: none).
CollectiveTraffic traffic_of(CollectiveKind kind, double bytes, int ranks, int stride,
                             const InstanceSpec& instance, const RankModel& rank,
                             bool inference = false);
// One rank's view of the instance's links, as the simulated clock's CoreLinks of that chip.
CoreLinks links_of(const InstanceSpec& instance, const CostData& data, const RankModel& rank);

// The link model's price of the collective on the links alone. Writes the links and algorithm it
// used to `over` when given.
double collective_link_ns(CollectiveKind kind, double bytes, int ranks, int stride,
                          const InstanceSpec& instance, const CostData& data, const RankModel& rank,
                          std::string* over = nullptr, bool inference = false);
// Inside a projected program: the link price plus the dependent step that triggers it and waits
// for its completion (the family's op_latency_us, estimate.ini).
double collective_ns(CollectiveKind kind, double bytes, int ranks, int stride,
                     const InstanceSpec& instance, const CostData& data, const RankModel& rank,
                     std::string* over = nullptr, bool inference = false);

}  // namespace nrtsim::cost
