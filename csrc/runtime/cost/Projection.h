// The projection: what one training step, one prefill or one decode step of a model costs on an
// instance (Trainium or GPU), from the per-rank work of every op a trace recorded (the same Work
// the backend's cost builder derives for a launch record), a parallel layout and the instance's
// data.
//
//   per-rank compute   each op through the rank's model: a Trainium logical core is the engine
//                      model of neuron_cores.ini (CoreModel); a GPU is a roofline (tensor cores,
//                      CUDA cores, HBM). An op lasts as long as its busiest engine. A trace is one
//                      decoder layer plus what lies outside the layers: each op carries how many
//                      times a step runs it (the layers of a pipeline stage for a layer's ops).
//   collectives        the ones the model's parallel plan implies are in the trace, where they
//                      happen, with their bytes (tensor-parallel all-reduces and gathers, expert
//                      all-to-alls); data, context and pipeline parallelism add theirs here. Each
//                      is priced over the links its group spans, with the algorithm the vendor's
//                      library picks by message size (Neuron: mesh, recursive doubling-halving,
//                      ring; NCCL: ring or NVLink SHARP; TensorRT-LLM: one-shot, two-shot).
//   fixed costs        a compiled program pays one launch, and each Tensor-engine op in it one
//                      dependent-step latency; a serving loop that is not asynchronous pays the
//                      host's time between two steps.
//   overlap            forward collectives sit on the critical path; in the backward, the
//                      input-gradient collectives overlap the weight-gradient matmuls; context-
//                      parallel key/value exchange overlaps attention; DP gradient reduction hides
//                      behind the last micro-batch's backward, FSDP gathers behind forward and
//                      backward; what does not fit is exposed.
//
// Torch-free: the backend (csrc/backend/estimate) turns ATen ops into TracedOps.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/Engine.h"
#include "runtime/EngineModel.h"
#include "runtime/LaunchRecord.h"
#include "runtime/cost/Collectives.h"
#include "runtime/cost/CostData.h"
#include "runtime/cost/RankModel.h"
#include "runtime/cost/TracedOp.h"

namespace nrtsim::cost {

// What the collectives and the memory table need to know about the model, for one rank of one
// pipeline stage.
struct ModelFacts {
  int layers = 0;                    // of the full model
  int hidden = 0;
  double params = 0;                 // of the full model
  double params_per_rank = 0;        // what one rank of the stage holds after sharding
  double weight_bytes = 2;           // per parameter as stored (1 for FP8 / int8 weights)
  double optimizer_bytes = 12;       // per parameter: FP32 master copy, Adam's m and v
  double gradient_bytes = 2;         // per parameter
  int activation_bytes = 2;          // per activation element (the collectives' dtype)
  // Training, one micro-batch on one rank: what the forward keeps for the backward without
  // recompute, what selective recompute keeps (all but the attention core's activations), the
  // layers' inputs (what full recompute keeps) and one layer's full activations (live while
  // its backward runs under full recompute).
  double activation_bytes_per_rank = 0;
  double selective_activation_bytes_per_rank = 0;
  double layer_input_bytes_per_rank = 0;
  double layer_activation_bytes = 0;
  double kv_cache_bytes_per_rank = 0;  // inference: the KV cache the rank holds
  double draft_params_per_rank = 0;    // speculative decoding: the draft model's weights
  double draft_kv_cache_bytes_per_rank = 0;
  double kv_width = 0;               // key/value heads x head_dim one tp rank holds
};

enum class Recompute { kNone, kSelective, kFull };

// Rank order: tp fastest, then cp, then pp, then dp. Expert parallelism reuses ranks: in
// training the experts are spread over ep of the dp ranks; in inference over ep of the tp ranks
// (each expert then split over tp / ep of them), with attention data-parallel over adp groups
// of tp / adp ranks (NxD Inference's layout of mixture-of-experts models).
struct Layout {
  int tp = 1;
  int cp = 1;             // context parallelism: each rank holds 1/cp of every sequence
  int pp = 1;
  int dp = 1;
  int ep = 1;
  int adp = 1;            // attention data parallelism inside the tp group (inference)
  bool fsdp = false;      // shard parameters, gradients and optimizer state over the dp group
  bool zero1 = false;     // shard the optimizer state over the dp group (ZeRO stage 1)
  Recompute recompute = Recompute::kNone;
  int microbatches = 1;   // per step and dp replica (pipeline depth for pp > 1)

  int ranks() const { return tp * cp * pp * dp; }
};

enum class Phase { kTrain, kPrefill, kDecode };

struct Workload {
  Phase phase = Phase::kTrain;
  // Training: tokens of one micro-batch of one replica (sequences x length); prefill: the
  // prompt tokens of the batch; decode: the sequences of the batch.
  double tokens_per_microbatch = 0;
  bool compiled = true;       // one program per phase (one launch cost) vs one launch per op
  bool fp8 = false;           // 16-bit matmuls run at the FP8 Tensor-engine / tensor-core rate
  // Stored bytes per weight over the traced dtype's (0.5: FP8 or int8 weights of a 16-bit
  // model): the weight reads and the weights' HBM shrink by it.
  double weight_scale = 1;
  // Stored bytes per KV-cache element over the traced dtype's (0.5: an FP8 KV cache of a 16-bit
  // model): attention's reads, the cache's writes and its HBM shrink by it.
  double kv_scale = 1;
  // Inference: the host loop overlaps the device (asynchronous runtime / scheduling) or waits
  // for each step's result before preparing the next (pays the data file's host_step_us).
  bool async_host = true;
  // Speculative decoding: the draft proposes `speculation` tokens per step (the trace's "draft"
  // ops, counted that many times), the target verifies them in one step, and each is accepted
  // with probability `acceptance`. fused: draft and target in one program (NxD Inference's
  // fused speculation); else each draft step is its own program and host step.
  int speculation = 0;
  double acceptance = 0;
  bool fused_speculation = true;
  int draft_tp = 1;  // the draft model's tensor-parallel group (its collectives' group "dtp")

  bool training() const { return phase == Phase::kTrain; }
};

struct OpCost {
  std::string op, phase;
  double count = 0;
  double ns = 0;  // per rank, per micro-batch (training) or per step
  std::array<double, kEngineCount> engine_ns{};
  double flops = 0;
  double bytes = 0;
};

struct PhaseCost {
  std::string phase;
  double ns = 0;          // per rank, per micro-batch / step, compute and its collectives
  double compute_ns = 0;
  double fixed_ns = 0;    // launch costs
  double collective_ns = 0;
  std::array<double, kEngineCount> engine_ns{};
  std::string bound;      // "tensor", "dma (HBM)", "vector", "scalar", "gpsimd", "collectives", "launch"
};

struct CollectiveCost {
  std::string name;       // "tp all-reduce", "dp all-reduce", "fsdp all-gather", "pp send"
  std::string over;       // link(s) and algorithm
  int ranks = 0;
  double bytes = 0;       // buffer size of one call
  double count = 0;       // calls per step on one rank
  double ns_each = 0;
  double exposed_ns = 0;  // per step, on the critical path
};

// What a step's time is made of: the parts add up to step_ns exactly (the chart draws them).
struct StepPart {
  std::string name;
  double ns = 0;
};

// HBM one rank holds, by what holds it.
struct MemoryPart {
  std::string name;
  double bytes = 0;
};

struct Projection {
  std::string instance, accelerator;
  bool gpu = false;
  int ranks = 0;
  int ranks_per_instance = 0;
  int instances = 0;
  double step_ns = 0;
  double tokens_per_step = 0;
  double tokens_per_s = 0;
  double useful_flops_per_step = 0;  // Tensor-engine FLOPs of all ranks
  double peak_flops_per_rank_ns = 0; // BF16 dense, FLOP per ns
  double mfu = 0;
  double price_usd_per_hour = 0;     // per instance; 0 when unknown
  std::string price_source;
  double usd_per_million_tokens = 0; // 0 when the price is unknown
  double hbm_bytes_per_rank = 0;
  double hbm_capacity_per_rank = 0;
  double pipeline_bubble_ns = 0;
  double tokens_per_sequence_step = 1;  // decode: tokens one sequence gains per step (speculation)
  std::string bound;
  std::vector<PhaseCost> phases;
  std::vector<OpCost> ops;           // aggregated by (op, phase), most expensive first
  std::vector<CollectiveCost> collectives;
  std::vector<StepPart> parts;
  std::vector<MemoryPart> memory;
  std::array<double, kEngineCount> engine_ns{};  // per rank, per step
};

// Throws Error(kInvalidArgument) for a layout or workload that cannot be projected.
Projection project(const std::vector<TracedOp>& ops, const ModelFacts& facts, const Layout& layout,
                   const Workload& workload, const InstanceSpec& instance, const CostData& data,
                   const std::map<std::string, CoreSpec>& chips);

}  // namespace nrtsim::cost
