// One decoder layer's ops out of two traces of the same model, one with n layers and one with
// 2n: the ops the second adds are one n-layer period's, the rest lies outside the layers
// (embedding, final norm, head, loss). A whole model is then the outside ops once and the
// period's ops once per period, without tracing every layer: a 126-layer model costs a
// 2-layer trace.
//
// Ops are matched by everything the projection prices (name, phase, kind, number format, work
// per engine, tile occupancy, collective). An op whose work grows with the layers instead of
// repeating (a fused optimizer step over all parameters) appears with different work in the two
// traces: its growth is one period's share and the rest the outside share.
#pragma once

#include <vector>

#include "runtime/cost/TracedOp.h"

namespace nrtsim::cost {

struct LayerSplit {
  std::vector<TracedOp> outside;  // once per step (count = how many)
  std::vector<TracedOp> period;   // once per period of layers (count = how many per period)
};

// `short_trace` ran n layers and `long_trace` 2n. Throws Error(kInvalidArgument) when the
// difference is not one repeated period (the layers are not alike), naming the first op that
// does not match.
LayerSplit split_layers(const std::vector<TracedOp>& short_trace,
                        const std::vector<TracedOp>& long_trace);

// `parts`: traces with the count each of their ops runs per step and whether they are layer
// ops; the result holds every op once, its count multiplied.
struct TracePart {
  const std::vector<TracedOp>* ops = nullptr;
  double count = 1;
  bool in_layer = false;
};
std::vector<TracedOp> combine(const std::vector<TracePart>& parts);

}  // namespace nrtsim::cost
