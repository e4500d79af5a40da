// One op of a traced rank, as the projection sees it: its work (the same Work a launch record
// carries), how many times a step runs it, and, for the collectives a model's parallel plan
// implies, their kind, group and bytes.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/LaunchRecord.h"

namespace nrtsim::cost {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSend };
const char* collective_kind_name(CollectiveKind kind);

// One op one rank runs.
struct TracedOp {
  std::string op;     // "aten::mm"
  std::string phase;  // "forward", "backward", "optimizer", "prefill", "decode", "draft"
  LaunchKind kind = LaunchKind::kKernel;
  Work work;
  // Tensor-engine FLOPs the op occupies the engine for on a NeuronCore, tile padding included
  // (>= work[kTensor].ops; equal when the shapes fill whole tiles).
  uint64_t tensor_tile_ops = 0;
  // Scaled dot-product attention (forward or backward): under context parallelism its keys and
  // values come from the whole sequence, not the rank's shard.
  bool attention = false;
  // Bytes of the op's reads that are model weights (a matmul's weight operand): what quantized
  // weights shrink.
  uint64_t weight_bytes_read = 0;
  // How many times one step (one micro-batch in training) runs it: 1 outside the layers, the
  // layers of a pipeline stage for a layer's ops, the draft steps for a draft model's.
  double count = 1;
  bool in_layer = false;  // part of a repeated decoder layer (recompute reruns these)
  // Works on an activation every tensor-parallel rank holds whole (a norm, a residual add):
  // sequence parallelism splits it over the tp ranks.
  bool sequence_parallel = false;
  // kind == LaunchKind::kCollective: a collective the model's parallel plan implies here, over
  // the group named ("tp": the attention / dense tensor-parallel group, "etp": the ranks sharing
  // one expert, "ep": the expert-parallel group), moving `collective_bytes` (the buffer: all-
  // reduce in/out, all-gather output, all-to-all send).
  CollectiveKind collective = CollectiveKind::kAllReduce;
  std::string group;
  double collective_bytes = 0;
};

}  // namespace nrtsim::cost
