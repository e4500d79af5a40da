#include "runtime/cost/Projection.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "runtime/Error.h"
#include "runtime/InstancePreset.h"

namespace nrtsim::cost {

namespace {

// GB/s (1e9 bytes per second) is bytes per ns; TFLOP/s is 1e3 FLOP per ns.
constexpr double kTflopsToPerNs = 1e3;

double gpu_tensor_tflops(const GpuSpec& g, Precision p) {
  switch (p) {
    case Precision::kFp8: return g.fp8_tflops;
    case Precision::kBf16: return g.bf16_tflops;
    // PyTorch's default FP32 matmul on CUDA does not use TF32 (allow_tf32 is off): CUDA cores.
    case Precision::kFp32: return g.vector_tflops;
  }
  return g.bf16_tflops;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

RankModel::RankModel(const InstanceSpec& instance, const CostData& data,
                     const std::map<std::string, CoreSpec>& chips) {
  if (instance.is_gpu()) {
    gpu_ = true;
    eff_ = data.gpu;
    gpu_spec_ = data.gpu_spec(instance.accelerator);
    peak_bf16_ = gpu_spec_.bf16_tflops * kTflopsToPerNs;
    hbm_capacity_ = gpu_spec_.hbm_gbytes * 1e9;
    hbm_bytes_per_ns_ = gpu_spec_.hbm_gbytes_per_s;
    return;
  }
  eff_ = data.trainium;
  // Chips, cores per chip, HBM per chip and the default LNC are the runtime's instance presets.
  const InstancePreset& preset = find_preset(instance.name);
  auto it = chips.find(instance.accelerator);
  if (it == chips.end()) {
    throw Error(ErrorCode::kConfiguration, "instance " + instance.name + " names accelerator '" +
                                               instance.accelerator +
                                               "', which the engine model file has no section for");
  }
  const int lnc = preset.chip.default_lnc;
  core_ = CoreModel(it->second, lnc);
  ranks_per_device_ = preset.chip.physical_cores / lnc;
  peak_bf16_ = core_.tensor_flops_per_ns(Precision::kBf16);
  hbm_capacity_ = static_cast<double>(preset.chip.hbm_bytes) / ranks_per_device_;
  hbm_bytes_per_ns_ = core_.hbm_bytes_per_ns();
}

std::array<double, kEngineCount> RankModel::busy_ns(const TracedOp& op, bool fp8) const {
  const Work& w = op.work;
  std::array<double, kEngineCount> busy{};
  const double tensor_ops = static_cast<double>(w[Engine::kTensor].ops);
  const double bytes = static_cast<double>(w.bytes_read() + w.bytes_written());
  const Precision precision =
      fp8 && tensor_ops > 0 && w.precision == Precision::kBf16 ? Precision::kFp8 : w.precision;
  if (gpu_) {
    busy[index_of(Engine::kTensor)] =
        tensor_ops / (gpu_tensor_tflops(gpu_spec_, precision) * kTflopsToPerNs * eff_.tensor);
    for (Engine e : {Engine::kVector, Engine::kScalar, Engine::kGpSimd}) {
      busy[index_of(e)] = static_cast<double>(w[e].ops) / (gpu_spec_.vector_tflops * kTflopsToPerNs);
    }
    busy[index_of(Engine::kDma)] = bytes / (hbm_bytes_per_ns_ * eff_.hbm);
    return busy;
  }
  busy = core_.busy_ns(w, op.kind);
  // The Tensor engine is occupied by whole tiles, not by the useful FLOPs alone.
  const double occupied = std::max(tensor_ops, static_cast<double>(op.tensor_tile_ops));
  busy[index_of(Engine::kTensor)] =
      occupied / (core_.tensor_flops_per_ns(precision) * eff_.tensor);
  busy[index_of(Engine::kDma)] /= eff_.hbm;
  return busy;
}

double RankModel::launch_ns(LaunchKind kind) const {
  if (gpu_) return kind == LaunchKind::kHostFallback ? 0 : gpu_spec_.kernel_launch_us * 1e3;
  return core_.fixed_cost_ns(kind);
}

double RankModel::instruction_overhead_ns(Engine engine) const {
  if (gpu_ || eff_.instruction_overhead_cycles <= 0) return 0;
  const CoreSpec& spec = core_.spec();
  switch (engine) {
    case Engine::kTensor: return eff_.instruction_overhead_cycles / spec.tensor_clock_ghz;
    case Engine::kVector: return eff_.instruction_overhead_cycles / spec.vector_clock_ghz;
    case Engine::kScalar: return eff_.instruction_overhead_cycles / spec.scalar_clock_ghz;
    case Engine::kGpSimd: return eff_.instruction_overhead_cycles / spec.gpsimd_clock_ghz;
    case Engine::kDma: return 0;  // descriptors are queued ahead, as the weight streams are
  }
  return 0;
}

double collective_ns(CollectiveKind kind, double bytes, int ranks, int stride,
                     const InstanceSpec& instance, const CostData& data, const RankModel& rank,
                     std::string* over) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const int per_instance = instance.devices * rank.ranks_per_device();
  // Members of the group inside one instance, and the instances it spans.
  const int g = stride >= per_instance ? 1 : std::min(ranks, std::max(1, per_instance / stride));
  const int k = ceil_div(ranks, g);
  const Efficiency& eff = rank.efficiency();
  const LinkSpec& up = data.link(instance.scale_up);
  const LinkSpec& out = data.link(instance.scale_out);
  std::string used;

  // Time for n members at per-member bandwidth bw (bytes/ns); `steps` algorithm steps of latency
  // alpha per reduce-scatter or all-gather pass (an all-reduce is one of each).
  auto ring = [&](double buffer, int n, double bw, double steps, double alpha) {
    if (n <= 1) return 0.0;
    const double share = static_cast<double>(n - 1) / n;
    switch (kind) {
      case CollectiveKind::kAllReduce: return 2 * share * buffer / bw + 2 * steps * alpha;
      case CollectiveKind::kAllGather:
      case CollectiveKind::kReduceScatter: return share * buffer / bw + steps * alpha;
      case CollectiveKind::kSend: return buffer / bw + alpha;
    }
    return 0.0;
  };

  double total = 0;
  if (g > 1) {
    double bw = 0, steps = 0;
    if (rank.gpu()) {
      bw = up.gbytes_per_s * eff.link;
      steps = g - 1;
      used = up.name;
    } else {
      // Members per chip and chips; every rank of a chip takes part in a collective of its own
      // group at the same time, so the chip's links are shared by all its ranks.
      const int rpc = rank.ranks_per_device();
      const int c = stride >= rpc ? 1 : std::min(g, rpc / stride);
      const int m = ceil_div(g, c);
      if (m == 1) {
        // Inside one chip the data moves through HBM: each byte is read and written.
        bw = rank.hbm_bytes_per_ns() * eff.hbm / 2;
        used = "HBM (one chip)";
        steps = c - 1;
      } else {
        bw = up.gbytes_per_s * eff.link / rpc;
        used = up.name;
        // Neuron's runtime picks the algorithm by size, as the simulated clock does (the link
        // model, LinkModel.h: mesh, recursive doubling-halving); rings step along each torus
        // dimension.
        const CollectiveAlgorithm algorithm = algorithm_for(up, bytes);
        if (algorithm != CollectiveAlgorithm::kRing) {
          steps = steps_per_pass(algorithm, g, m);
          used += std::string(" (") + collective_algorithm_name(algorithm) + ")";
        } else {
          const int ax = std::min(instance.torus_x, m);
          const int ay = ceil_div(m, ax);
          steps = (c - 1) + (ax - 1) + (ay - 1);
        }
      }
    }
    total += ring(bytes, g, bw, steps, up.hop_latency_us * 1e3);
  }
  if (k > 1) {
    // Every rank of an instance talks to other instances at once: the NICs are shared by all.
    const double bw = instance.efa_gbits_per_s / 8 * eff.link / per_instance;
    // After the intra-instance reduce-scatter each member carries 1/g of the buffer.
    const double buffer = kind == CollectiveKind::kSend ? bytes : bytes / g;
    total += ring(buffer, k, bw, k - 1, out.hop_latency_us * 1e3);
    used += (used.empty() ? "" : " + ") + out.name;
  }
  if (kind == CollectiveKind::kSend && k > 1 && g > 1) {
    // A send crosses one boundary only: the inter-instance hop, not an intra ring as well.
    const double bw = instance.efa_gbits_per_s / 8 * eff.link / per_instance;
    total = bytes / bw + out.hop_latency_us * 1e3;
    used = out.name;
  }
  // The compute engines trigger the collective (its own cores run it) and wait for its
  // completion semaphore: one dependent-step latency.
  total += eff.op_latency_us * 1e3;
  if (over != nullptr) *over = used;
  return total;
}

namespace {

const char* bound_of(const std::array<double, kEngineCount>& engines, double fixed,
                     double collective) {
  static const char* names[kEngineCount] = {"tensor", "vector", "scalar", "gpsimd", "dma (HBM)"};
  size_t best = 0;
  for (size_t i = 1; i < kEngineCount; ++i) {
    if (engines[i] > engines[best]) best = i;
  }
  const double top = engines[best];
  if (collective > top && collective >= fixed) return "collectives";
  if (fixed > top) return "launch";
  return names[best];
}

}  // namespace

Projection project(const std::vector<TracedOp>& ops, const ModelFacts& facts, const Layout& layout,
                   const Workload& workload, const InstanceSpec& instance, const CostData& data,
                   const std::map<std::string, CoreSpec>& chips) {
  if (layout.tp < 1 || layout.cp < 1 || layout.pp < 1 || layout.dp < 1 || layout.microbatches < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "layout tp, cp, pp, dp and microbatches must all be at least 1");
  }
  if (workload.tokens_per_microbatch <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "the workload has no tokens per micro-batch");
  }
  const RankModel rank(instance, data, chips);
  const double op_latency = rank.efficiency().op_latency_us * 1e3;
  Projection p;
  p.instance = instance.name;
  p.accelerator = instance.accelerator;
  p.gpu = rank.gpu();
  p.ranks = layout.ranks();
  p.ranks_per_instance = instance.devices * rank.ranks_per_device();
  p.instances = ceil_div(p.ranks, p.ranks_per_instance);
  p.peak_flops_per_rank_ns = rank.peak_bf16_flops_per_ns();
  p.hbm_capacity_per_rank = rank.hbm_capacity_bytes();
  p.price_usd_per_hour = instance.price_usd_per_hour;
  p.price_source = instance.price_source;

  // Per-op and per-phase compute on one rank.
  std::map<std::pair<std::string, std::string>, OpCost> by_op;
  std::vector<std::string> phase_order;
  std::map<std::string, PhaseCost> phases;
  std::map<std::string, double> attention_ns;  // per phase: what context-parallel exchange hides behind
  double backward_matmul_ns = 0;               // dX and dW matmuls of the backward
  double useful_flops = 0;
  for (const TracedOp& traced : ops) {
    TracedOp op = traced;
    if (op.attention && layout.cp > 1) {
      // The rank's queries attend to the keys of the whole sequence (gathered from its cp
      // peers), not only to its own 1/cp of them.
      op.work[Engine::kTensor].ops *= static_cast<uint64_t>(layout.cp);
      op.tensor_tile_ops *= static_cast<uint64_t>(layout.cp);
    }
    auto busy = rank.busy_ns(op, workload.fp8);
    const bool elementwise_or_move =
        (op.kind == LaunchKind::kKernel && op.work.main_engine() != Engine::kTensor) ||
        op.kind == LaunchKind::kCopyDeviceToDevice;
    if (workload.compiled && elementwise_or_move) {
      // Inside a compiled program the compiler fuses elementwise work, casts and copies into
      // their neighbours: an intermediate crosses HBM once (written by its producer, read by a
      // matmul), not once per op that touches it. Charge such an op its output only.
      busy[index_of(Engine::kDma)] = static_cast<double>(op.work.bytes_written()) /
                                     (rank.hbm_bytes_per_ns() * rank.efficiency().hbm);
    }
    const double longest = *std::max_element(busy.begin(), busy.end());
    // Eager: every op is a launch. Compiled: each Tensor-engine op waits for its first input
    // tile from the op before it (a DMA start); a fused elementwise op is still an instruction
    // that waits on its producer, and pays the engine's static overhead.
    const double fixed = !workload.compiled      ? rank.launch_ns(op.kind)
                         : !elementwise_or_move ? op_latency
                                                : rank.instruction_overhead_ns(op.work.main_engine());
    if (!phases.count(op.phase)) {
      phase_order.push_back(op.phase);
      phases[op.phase].phase = op.phase;
    }
    PhaseCost& ph = phases[op.phase];
    ph.compute_ns += longest;
    ph.fixed_ns += fixed;
    for (size_t e = 0; e < kEngineCount; ++e) ph.engine_ns[e] += busy[e];
    if (op.attention) attention_ns[op.phase] += longest;
    if (op.phase == "backward" && op.tensor_tile_ops > 0 && !op.attention) {
      backward_matmul_ns += busy[index_of(Engine::kTensor)];
    }
    OpCost& oc = by_op[{op.op, op.phase}];
    oc.op = op.op;
    oc.phase = op.phase;
    oc.count += 1;
    oc.ns += longest + fixed;
    for (size_t e = 0; e < kEngineCount; ++e) oc.engine_ns[e] += busy[e];
    oc.flops += static_cast<double>(op.work[Engine::kTensor].ops);
    oc.bytes += static_cast<double>(op.work.bytes_read() + op.work.bytes_written());
    useful_flops += static_cast<double>(op.work[Engine::kTensor].ops);
  }
  // A compiled phase is one program: one launch, plus its ops' dependent-step latencies.
  if (workload.compiled) {
    for (auto& [name, ph] : phases) ph.fixed_ns += rank.launch_ns(LaunchKind::kProgram);
  }

  const int layers_per_stage = ceil_div(std::max(facts.layers, 1), layout.pp);
  // One micro-batch's activations on one rank: its 1/cp of the sequence.
  const double act_message =
      workload.tokens_per_microbatch / layout.cp * facts.hidden * facts.activation_bytes;
  auto add_collective = [&](const std::string& name, CollectiveKind kind, double bytes, int ranks,
                            int stride, double count) {
    CollectiveCost c;
    c.name = name;
    c.ranks = ranks;
    c.bytes = bytes;
    c.count = count;
    c.ns_each = collective_ns(kind, bytes, ranks, stride, instance, data, rank, &c.over);
    p.collectives.push_back(c);
    return p.collectives.size() - 1;
  };
  auto phase_ns = [&](const std::string& name) {
    auto it = phases.find(name);
    return it == phases.end() ? 0.0 : it->second.compute_ns + it->second.fixed_ns;
  };
  const double mb_per_step = workload.training ? layout.microbatches : 1;

  // Tensor parallelism: the Megatron layout's two all-reduces per layer (attention output, MLP
  // output) in the forward and two in the backward (sequence parallelism's all-gather and
  // reduce-scatter move the same bytes). Forward ones block the next op. Backward ones carry the
  // input gradients, which nothing in the weight-gradient matmuls waits for: the compiler's
  // separate compute and collective queues run them side by side (compute-comm-overlap guide).
  double tp_forward = 0, tp_backward = 0;
  size_t tp_index = 0;
  if (layout.tp > 1) {
    const double calls = 2.0 * layers_per_stage;
    tp_index = add_collective("tp all-reduce", CollectiveKind::kAllReduce, act_message, layout.tp, 1,
                              calls * (workload.training ? 2 : 1) * mb_per_step);
    tp_forward = calls * p.collectives[tp_index].ns_each;
    if (workload.training) {
      // dX and dW matmuls have equal FLOPs: half the backward's matmul time is weight gradients.
      tp_backward = std::max(0.0, tp_forward - 0.5 * backward_matmul_ns);
      p.collectives[tp_index].exposed_ns = (tp_forward + tp_backward) * mb_per_step;
    }
  }
  // Context parallelism: each layer gathers the keys and values of its cp peers (forward, and
  // again in the backward, which also reduce-scatters their gradients), streamed while the
  // attention works on the blocks already there: exposed only beyond the attention's time.
  double cp_forward = 0, cp_backward = 0;
  if (layout.cp > 1 && facts.kv_width > 0) {
    const double kv_bytes =
        2.0 * workload.tokens_per_microbatch * facts.kv_width * facts.activation_bytes;
    const auto ag = add_collective("cp all-gather (k, v)", CollectiveKind::kAllGather, kv_bytes,
                                   layout.cp, layout.tp,
                                   layers_per_stage * (workload.training ? 2 : 1) * mb_per_step);
    double per_layer_fwd = p.collectives[ag].ns_each;
    double per_layer_bwd = 0;
    if (workload.training) {
      const auto rs = add_collective("cp reduce-scatter (dk, dv)", CollectiveKind::kReduceScatter,
                                     kv_bytes, layout.cp, layout.tp, layers_per_stage * mb_per_step);
      per_layer_bwd = p.collectives[ag].ns_each + p.collectives[rs].ns_each;
    }
    const double fwd_attention = attention_ns[workload.training ? "forward" : "decode"];
    cp_forward = std::max(0.0, layers_per_stage * per_layer_fwd - fwd_attention);
    cp_backward = std::max(0.0, layers_per_stage * per_layer_bwd - attention_ns["backward"]);
    p.collectives[ag].exposed_ns = (cp_forward + cp_backward) * mb_per_step;
  }
  // Pipeline: one activation send per stage boundary forward (and its gradient backward). The tp
  // ranks of a stage hold the same activation: each sends 1/tp of it and the next stage
  // all-gathers the pieces over its own links (Megatron's scatter-gather; sequence parallelism
  // holds it so already).
  double pp_send = 0;
  if (layout.pp > 1) {
    const double sends = (layout.pp - 1) * (workload.training ? 2.0 * layout.microbatches : 1.0);
    const auto i = add_collective("pp send", CollectiveKind::kSend, act_message / layout.tp, 2,
                                  layout.tp * layout.cp, sends);
    pp_send = p.collectives[i].ns_each;
    p.collectives[i].exposed_ns = p.collectives[i].ns_each * p.collectives[i].count;
    if (layout.tp > 1) {
      const auto g = add_collective("pp gather", CollectiveKind::kAllGather, act_message,
                                    layout.tp, 1, sends);
      pp_send += p.collectives[g].ns_each;
      p.collectives[g].exposed_ns = p.collectives[g].ns_each * p.collectives[g].count;
    }
  }

  if (workload.training) {
    const double fwd = phase_ns("forward") + tp_forward + cp_forward;
    const double bwd = phase_ns("backward") + tp_backward + cp_backward;
    const double opt = phase_ns("optimizer");
    // Phases of other names (a user's script traced as one phase) run once per micro-batch too.
    double other = 0;
    for (const auto& [name, ph] : phases) {
      if (name != "forward" && name != "backward" && name != "optimizer") other += phase_ns(name);
    }
    if (layout.tp > 1 && layout.recompute) p.collectives[tp_index].exposed_ns += tp_forward * mb_per_step;
    for (auto& [name, ph] : phases) {
      if (name == "forward") ph.collective_ns = tp_forward + cp_forward;
      if (name == "backward") ph.collective_ns = tp_backward + cp_backward;
    }
    // Activation checkpointing reruns each layer's forward (its TP collectives included) before
    // its backward.
    const double recompute = layout.recompute ? fwd : 0;
    const double per_microbatch = fwd + recompute + bwd + other + (layout.pp > 1 ? 2 * pp_send : 0);
    // 1F1B: the pipeline fills and drains once per step: pp - 1 micro-batch slots idle.
    const double pipeline = (layout.microbatches + layout.pp - 1) * per_microbatch;
    p.pipeline_bubble_ns = (layout.pp - 1) * per_microbatch;
    double dp_exposed = 0;
    const double grad_bytes = facts.params_per_rank * facts.param_bytes;
    double gradient_sync = 0;  // what must fit beside forward and backward
    size_t first_dp = p.collectives.size();
    if (layout.dp > 1) {
      const int stride = layout.tp * layout.cp * layout.pp;
      if (layout.fsdp) {
        const auto ag = add_collective("fsdp all-gather", CollectiveKind::kAllGather, grad_bytes,
                                       layout.dp, stride, 2);
        const auto rs = add_collective("fsdp reduce-scatter", CollectiveKind::kReduceScatter,
                                       grad_bytes, layout.dp, stride, 1);
        gradient_sync = 2 * p.collectives[ag].ns_each + p.collectives[rs].ns_each;
      } else {
        const auto ar = add_collective("dp all-reduce", CollectiveKind::kAllReduce, grad_bytes,
                                       layout.dp, stride, 1);
        gradient_sync = p.collectives[ar].ns_each;
      }
    }
    if (layout.cp > 1) {
      // The cp ranks of a replica hold the same weights: their gradients (the FSDP shard, or
      // all of them) are summed too.
      const auto ar = add_collective("cp gradient all-reduce", CollectiveKind::kAllReduce,
                                     grad_bytes / (layout.fsdp ? layout.dp : 1), layout.cp,
                                     layout.tp, 1);
      gradient_sync += p.collectives[ar].ns_each;
    }
    if (p.collectives.size() > first_dp) {
      // Prefetched FSDP gathers and the gradients' reduction run beside forward and backward;
      // a plain (bucketed) all-reduce starts as gradients are ready: the last backward hides it.
      const double window = layout.fsdp ? layout.microbatches * (fwd + bwd) : bwd;
      dp_exposed = std::max(0.0, gradient_sync - window);
      p.collectives[first_dp].exposed_ns = dp_exposed;
    }
    p.step_ns = pipeline + dp_exposed + opt;
    p.tokens_per_step = workload.tokens_per_microbatch * layout.microbatches * layout.dp;
    p.useful_flops_per_step = useful_flops * layout.microbatches * p.ranks;
    const double optimizer_state = facts.params_per_rank * 12.0;  // FP32 master copy, Adam m and v
    const double weights_and_grads = facts.params_per_rank * 2.0 * facts.param_bytes;
    const double shard = layout.fsdp ? layout.dp : 1;
    // Checkpointed: each layer's input stays (one micro-batch's 1/cp, per stage), and one layer's
    // full activations live while its backward runs.
    const double activations =
        layout.recompute ? layers_per_stage * act_message * (layout.tp > 1 ? 1.0 / layout.tp : 1.0) +
                               facts.activation_bytes_per_rank / layers_per_stage
                         : facts.activation_bytes_per_rank;
    p.hbm_bytes_per_rank = (weights_and_grads + optimizer_state) / shard +
                           activations * std::min(layout.microbatches, layout.pp);
  } else {
    // One decode step: every stage runs in turn for the one new token.
    const double stage = phase_ns("decode") + tp_forward + cp_forward;
    for (auto& [name, ph] : phases) {
      if (name == "decode") ph.collective_ns = tp_forward + cp_forward;
    }
    p.step_ns = layout.pp * stage + (layout.pp - 1) * pp_send;
    if (layout.tp > 1) p.collectives[tp_index].exposed_ns = tp_forward * layout.pp;
    for (auto& c : p.collectives) {
      if (c.name.rfind("cp ", 0) == 0) c.exposed_ns = cp_forward * layout.pp;
    }
    p.tokens_per_step = workload.tokens_per_microbatch * layout.dp;
    p.useful_flops_per_step = useful_flops * p.ranks;
    p.hbm_bytes_per_rank = facts.params_per_rank * facts.param_bytes + facts.kv_cache_bytes_per_rank;
  }

  for (const auto& name : phase_order) {
    PhaseCost ph = phases[name];
    ph.ns = ph.compute_ns + ph.fixed_ns + ph.collective_ns;
    ph.bound = bound_of(ph.engine_ns, ph.fixed_ns, ph.collective_ns);
    for (size_t e = 0; e < kEngineCount; ++e) {
      const double per_step = workload.training ? layout.microbatches : layout.pp;
      p.engine_ns[e] += ph.engine_ns[e] * per_step;
    }
    p.phases.push_back(ph);
  }
  for (auto& [key, oc] : by_op) p.ops.push_back(oc);
  std::sort(p.ops.begin(), p.ops.end(), [](const OpCost& a, const OpCost& b) { return a.ns > b.ns; });

  p.tokens_per_s = p.tokens_per_step / (p.step_ns * 1e-9);
  p.mfu = p.useful_flops_per_step / (p.step_ns * p.ranks * p.peak_flops_per_rank_ns);
  if (p.price_usd_per_hour > 0) {
    const double usd_per_s = p.instances * p.price_usd_per_hour / 3600.0;
    p.usd_per_million_tokens = usd_per_s / p.tokens_per_s * 1e6;
  }
  // The whole step's bound: the largest of the engines' totals and the exposed collectives.
  double collective_total = 0;
  for (const auto& c : p.collectives) collective_total += c.exposed_ns;
  double fixed_total = 0;
  for (const auto& ph : p.phases) {
    fixed_total += ph.fixed_ns * (workload.training ? layout.microbatches : layout.pp);
  }
  p.bound = bound_of(p.engine_ns, fixed_total, collective_total);
  return p;
}

}  // namespace nrtsim::cost
