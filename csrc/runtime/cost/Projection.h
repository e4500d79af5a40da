// The projection: what one training step or one decode step of a model costs on an instance
// (Trainium or GPU), from the per-rank work of every op a trace recorded (the same Work the
// backend's cost builder derives for a launch record), a parallel layout and the instance's data.
//
//   per-rank compute   each op through the rank's model: a Trainium logical core is the engine
//                      model of neuron_cores.ini (CoreModel); a GPU is a roofline (tensor cores,
//                      CUDA cores, HBM). An op lasts as long as its busiest engine.
//   collectives        over the links the group spans (NeuronLink torus, NVSwitch, EFA between
//                      instances): bandwidth term + latency per algorithm step, the algorithm
//                      chosen by message size as Neuron's runtime does (mesh, recursive
//                      doubling-halving, ring), + the trigger/completion of the collective.
//   fixed costs        a compiled program pays one launch, and each Tensor-engine op in it one
//                      dependent-step latency (its first input tile waits for the previous op).
//   overlap            forward TP collectives and pipeline sends sit on the critical path; in the
//                      backward, the input-gradient collectives overlap the weight-gradient
//                      matmuls (no dependency between them); context-parallel key/value exchange
//                      overlaps attention; DP gradient all-reduce hides behind the last
//                      micro-batch's backward, FSDP gathers behind forward+backward; what does
//                      not fit is exposed.
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
#include "runtime/cost/CostData.h"

namespace nrtsim::cost {

// One op one rank runs.
struct TracedOp {
  std::string op;     // "aten::mm"
  std::string phase;  // "forward", "backward", "optimizer", "decode"
  LaunchKind kind = LaunchKind::kKernel;
  Work work;
  // Tensor-engine FLOPs the op occupies the engine for on a NeuronCore, tile padding included
  // (>= work[kTensor].ops; equal when the shapes fill whole tiles).
  uint64_t tensor_tile_ops = 0;
  // Scaled dot-product attention (forward or backward): under context parallelism its keys and
  // values come from the whole sequence, not the rank's shard.
  bool attention = false;
};

// What the collectives and the memory estimate need to know about the model.
struct ModelFacts {
  int layers = 0;                    // of the full model
  int hidden = 0;
  double params = 0;                 // of the full model
  double params_per_rank = 0;        // after TP/PP sharding (what the traced rank holds)
  int param_bytes = 2;               // per parameter (and per gradient)
  int activation_bytes = 2;          // per activation element (the collectives' dtype)
  double kv_cache_bytes_per_rank = 0;
  double activation_bytes_per_rank = 0;  // what one micro-batch's forward keeps, per rank
  double kv_width = 0;               // key/value heads x head_dim one tp rank holds
};

// Rank order: tp fastest, then cp, then pp, then dp.
struct Layout {
  int tp = 1;
  int cp = 1;             // context parallelism: each rank holds 1/cp of every sequence
  int pp = 1;
  int dp = 1;
  bool fsdp = false;      // shard parameters, gradients and optimizer state over the dp group
  bool recompute = false; // activation checkpointing: keep layer inputs, rerun the forward in backward
  int microbatches = 1;   // per step and dp replica (pipeline depth for pp > 1)

  int ranks() const { return tp * cp * pp * dp; }
};

struct Workload {
  bool training = true;       // false: one decode step (one new token per sequence)
  double tokens_per_microbatch = 0;  // training: micro-batch size x sequence length; decode: batch
  bool compiled = true;       // one program per phase (one launch cost) vs one launch per op
  bool fp8 = false;           // 16-bit matmuls run at the FP8 Tensor-engine / tensor-core rate
};

struct OpCost {
  std::string op, phase;
  int count = 0;
  double ns = 0;  // per rank, per micro-batch (training) or per decode step
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
  std::string over;       // link(s)
  int ranks = 0;
  double bytes = 0;       // buffer size of one call
  double count = 0;       // calls per step
  double ns_each = 0;
  double exposed_ns = 0;  // per step, on the critical path
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
  std::string bound;
  std::vector<PhaseCost> phases;
  std::vector<OpCost> ops;           // aggregated by (op, phase), most expensive first
  std::vector<CollectiveCost> collectives;
  std::array<double, kEngineCount> engine_ns{};  // per rank, per step
};

// How long one op (or anything with a Work) takes on one rank of an instance.
class RankModel {
 public:
  RankModel(const InstanceSpec& instance, const CostData& data,
            const std::map<std::string, CoreSpec>& chips);

  // `fp8`: a 16-bit matmul runs at the FP8 rate (FP8 training casts its GEMM inputs).
  std::array<double, kEngineCount> busy_ns(const TracedOp& op, bool fp8 = false) const;
  double launch_ns(LaunchKind kind) const;
  // The static overhead of one instruction on `engine` (0 on a GPU, where a compiled program fuses
  // elementwise work into its neighbours' kernels).
  double instruction_overhead_ns(Engine engine) const;
  double peak_bf16_flops_per_ns() const { return peak_bf16_; }
  double hbm_capacity_bytes() const { return hbm_capacity_; }
  double hbm_bytes_per_ns() const { return hbm_bytes_per_ns_; }
  int ranks_per_device() const { return ranks_per_device_; }
  bool gpu() const { return gpu_; }
  const Efficiency& efficiency() const { return eff_; }

 private:
  bool gpu_ = false;
  Efficiency eff_;
  CoreModel core_;
  GpuSpec gpu_spec_;
  int ranks_per_device_ = 1;
  double peak_bf16_ = 0;
  double hbm_capacity_ = 0;
  double hbm_bytes_per_ns_ = 0;
};

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kSend };

// A group of `ranks` ranks, `stride` apart in the rank order (tp fastest, then cp, pp, dp).
// `bytes`: the full buffer (all-reduce in/out, all-gather output, reduce-scatter input, the sent
// message). Writes the links it used to `over` when given.
double collective_ns(CollectiveKind kind, double bytes, int ranks, int stride,
                     const InstanceSpec& instance, const CostData& data, const RankModel& rank,
                     std::string* over = nullptr);

Projection project(const std::vector<TracedOp>& ops, const ModelFacts& facts, const Layout& layout,
                   const Workload& workload, const InstanceSpec& instance, const CostData& data,
                   const std::map<std::string, CoreSpec>& chips);

}  // namespace nrtsim::cost
