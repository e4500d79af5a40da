// The projection: what one training step or one decode step of a model costs on an instance
// (Trainium or GPU), from the per-rank work of every op a trace recorded (the same Work the
// backend's cost builder derives for a launch record), a parallel layout and the instance's data.
//
//   per-rank compute   each op through the rank's model: a Trainium logical core is the engine
//                      model of neuron_cores.ini (CoreModel); a GPU is a roofline (tensor cores,
//                      CUDA cores, HBM). An op lasts as long as its busiest engine.
//   collectives        ring algorithms over the links the group spans (NeuronLink torus,
//                      NVSwitch, EFA between instances): bandwidth term + one hop latency per step.
//   overlap            TP collectives and pipeline sends sit on the critical path; DP gradient
//                      all-reduce hides behind the last micro-batch's backward, FSDP gathers behind
//                      forward+backward; what does not fit is exposed.
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
};

struct Layout {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  bool fsdp = false;      // shard parameters, gradients and optimizer state over the dp group
  int microbatches = 1;   // per step and dp replica (pipeline depth for pp > 1)

  int ranks() const { return tp * pp * dp; }
};

struct Workload {
  bool training = true;       // false: one decode step (one new token per sequence)
  double tokens_per_microbatch = 0;  // training: micro-batch size x sequence length; decode: batch
  bool compiled = true;       // one program per phase (one launch cost) vs one launch per op
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

  std::array<double, kEngineCount> busy_ns(const TracedOp& op) const;
  double launch_ns(LaunchKind kind) const;
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

// A group of `ranks` ranks, `stride` apart in the rank order (tp fastest, then pp, then dp).
// `bytes`: the full buffer (all-reduce in/out, all-gather output, reduce-scatter input, the sent
// message). Writes the links it used to `over` when given.
double collective_ns(CollectiveKind kind, double bytes, int ranks, int stride,
                     const InstanceSpec& instance, const CostData& data, const RankModel& rank,
                     std::string* over = nullptr);

Projection project(const std::vector<TracedOp>& ops, const ModelFacts& facts, const Layout& layout,
                   const Workload& workload, const InstanceSpec& instance, const CostData& data,
                   const std::map<std::string, CoreSpec>& chips);

}  // namespace nrtsim::cost
