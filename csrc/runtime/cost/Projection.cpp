#include "runtime/cost/Projection.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "runtime/Error.h"

namespace nrtsim::cost {

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

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

void check_layout(const Layout& l, const Workload& w) {
  auto bad = [](const std::string& what) { throw Error(ErrorCode::kInvalidArgument, what); };
  if (l.tp < 1 || l.cp < 1 || l.pp < 1 || l.dp < 1 || l.ep < 1 || l.adp < 1 || l.microbatches < 1) {
    bad("layout tp, cp, pp, dp, ep, adp and microbatches must all be at least 1");
  }
  if (l.tp % l.adp != 0) bad("attention data parallelism adp must divide tp");
  if (w.training()) {
    if (l.adp > 1) bad("attention data parallelism (adp) is an inference layout; use dp to train");
    if (l.ep > 1 && l.dp % l.ep != 0) bad("expert parallelism ep must divide dp in training");
  } else {
    if (l.ep > 1 && l.tp % l.ep != 0) bad("expert parallelism ep must divide tp in inference");
    if (l.recompute != Recompute::kNone || l.zero1 || l.fsdp) {
      bad("recompute, ZeRO-1 and FSDP are training layouts");
    }
  }
  if (l.fsdp && l.zero1) bad("FSDP already shards the optimizer state; use fsdp or zero1, not both");
  if (w.tokens_per_microbatch <= 0) bad("the workload has no tokens per micro-batch");
  if (w.speculation < 0 || w.acceptance < 0 || w.acceptance >= 1) {
    bad("speculative decoding needs speculation >= 0 tokens and an acceptance rate in [0, 1)");
  }
  if (w.speculation > 0 && w.phase != Phase::kDecode) bad("speculation applies to decode steps");
}

// The group a traced collective runs over: its size and the distance between its members in the
// rank order (tp fastest).
std::pair<int, int> group_of(const std::string& group, const Layout& l, const Workload& w) {
  const bool training = w.training();
  if (group == "tp") return {l.tp / l.adp, 1};
  if (group == "dtp") return {w.draft_tp, 1};
  if (group == "etp") return {training ? l.tp : l.tp / l.ep, 1};
  if (group == "ep") {
    return training ? std::make_pair(l.ep, l.tp * l.cp * l.pp) : std::make_pair(l.ep, l.tp / l.ep);
  }
  throw Error(ErrorCode::kInvalidArgument, "a traced collective names an unknown group '" + group + "'");
}

// The backward of a collective: the gradient of an all-gather is a reduce-scatter and the
// other way round; an all-reduce's (Megatron's g/f pair) and an all-to-all's are themselves.
CollectiveKind backward_of(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return CollectiveKind::kReduceScatter;
    case CollectiveKind::kReduceScatter: return CollectiveKind::kAllGather;
    default: return kind;
  }
}

}  // namespace

Projection project(const std::vector<TracedOp>& ops, const ModelFacts& facts, const Layout& layout,
                   const Workload& workload, const InstanceSpec& instance, const CostData& data,
                   const std::map<std::string, CoreSpec>& chips) {
  check_layout(layout, workload);
  const bool training = workload.training();
  const RankModel rank(instance, data, chips);
  const Efficiency& eff = rank.efficiency();
  const double op_latency = eff.op_latency_us * 1e3;
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
  double layer_forward_ns = 0;                 // the layers' forward: what full recompute reruns
  double layer_forward_attention_ns = 0;       // ... and its attention: what selective reruns
  double useful_flops = 0;
  std::vector<const TracedOp*> traced_collectives;
  for (const TracedOp& traced : ops) {
    if (traced.kind == LaunchKind::kCollective) {
      traced_collectives.push_back(&traced);
      continue;
    }
    TracedOp widened;
    const TracedOp* op = &traced;
    if (traced.attention && layout.cp > 1) {
      // The rank's queries attend to the keys of the whole sequence (gathered from its cp
      // peers), not only to its own 1/cp of them.
      widened = traced;
      widened.work[Engine::kTensor].ops *= static_cast<uint64_t>(layout.cp);
      widened.tensor_tile_ops *= static_cast<uint64_t>(layout.cp);
      op = &widened;
    }
    const bool cache_access = !training && (traced.attention || traced.op == "aten::index_copy_" ||
                                            traced.op == "aten::index_put_");
    if (workload.kv_scale != 1 && cache_access) {
      // A quantized KV cache: attention streams (and the update writes) fewer bytes of it.
      if (op != &widened) widened = traced;
      for (EngineWork& e : widened.work.engines) {
        e.bytes_read = static_cast<uint64_t>(e.bytes_read * workload.kv_scale);
        e.bytes_written = static_cast<uint64_t>(e.bytes_written * workload.kv_scale);
      }
      op = &widened;
    }
    auto busy = rank.busy_ns(*op, workload.fp8, workload.weight_scale);
    const bool elementwise_or_move =
        (op->kind == LaunchKind::kKernel && op->work.main_engine() != Engine::kTensor) ||
        op->kind == LaunchKind::kCopyDeviceToDevice;
    if (workload.compiled && elementwise_or_move) {
      // Inside a compiled program the compiler fuses elementwise work, casts and copies into
      // their neighbours: an intermediate crosses HBM once (written by its producer, read by a
      // matmul), not once per op that touches it. Charge such an op its output only.
      busy[index_of(Engine::kDma)] = static_cast<double>(op->work.bytes_written()) /
                                     (rank.hbm_bytes_per_ns() * eff.hbm);
    }
    const int attention_tp = layout.tp / layout.adp;
    if (op->sequence_parallel && attention_tp > 1 && workload.phase != Phase::kDecode) {
      // Tensor-parallel training and prefill run sequence parallelism (as Megatron-LM, NxD and
      // NxD Inference's context encoding do): each rank holds 1/tp of the tokens of what the
      // tp ranks would otherwise all hold whole.
      for (double& b : busy) b /= attention_tp;
    }
    const double longest = *std::max_element(busy.begin(), busy.end());
    // Eager: every op is a launch. Compiled: each Tensor-engine op waits for its first input
    // tile from the op before it (a DMA start); a fused elementwise op is still an instruction
    // that waits on its producer, and pays the engine's static overhead.
    const double fixed = !workload.compiled      ? rank.launch_ns(op->kind)
                         : !elementwise_or_move ? op_latency
                                                : rank.instruction_overhead_ns(op->work.main_engine());
    const double n = op->count;
    if (!phases.count(op->phase)) {
      phase_order.push_back(op->phase);
      phases[op->phase].phase = op->phase;
    }
    PhaseCost& ph = phases[op->phase];
    ph.compute_ns += n * longest;
    ph.fixed_ns += n * fixed;
    for (size_t e = 0; e < kEngineCount; ++e) ph.engine_ns[e] += n * busy[e];
    if (op->attention) attention_ns[op->phase] += n * longest;
    if (op->phase == "backward" && op->tensor_tile_ops > 0 && !op->attention) {
      backward_matmul_ns += n * busy[index_of(Engine::kTensor)];
    }
    if (op->phase == "forward" && op->in_layer) {
      layer_forward_ns += n * (longest + fixed);
      if (op->attention) layer_forward_attention_ns += n * (longest + fixed);
    }
    OpCost& oc = by_op[{op->op, op->phase}];
    oc.op = op->op;
    oc.phase = op->phase;
    oc.count += n;
    oc.ns += n * (longest + fixed);
    for (size_t e = 0; e < kEngineCount; ++e) oc.engine_ns[e] += n * busy[e];
    oc.flops += n * static_cast<double>(op->work[Engine::kTensor].ops);
    oc.bytes += n * static_cast<double>(op->work.bytes_read() + op->work.bytes_written());
    useful_flops += n * static_cast<double>(op->work[Engine::kTensor].ops);
  }
  // A compiled phase is one program: one launch, plus its ops' dependent-step latencies. Fused
  // speculation runs the draft inside the target's program.
  if (workload.compiled) {
    for (auto& [name, ph] : phases) {
      if (name != "draft" || !workload.fused_speculation) ph.fixed_ns += rank.launch_ns(LaunchKind::kProgram);
    }
  }
  auto phase_ns = [&](const std::string& name) {
    auto it = phases.find(name);
    return it == phases.end() ? 0.0 : it->second.compute_ns + it->second.fixed_ns;
  };

  auto add_collective = [&](const std::string& name, CollectiveKind kind, double bytes, int ranks,
                            int stride, double count) {
    CollectiveCost c;
    c.name = name;
    c.ranks = ranks;
    c.bytes = bytes;
    c.count = count;
    c.ns_each = collective_ns(kind, bytes, ranks, stride, instance, data, rank, &c.over, !training);
    p.collectives.push_back(c);
    return p.collectives.size() - 1;
  };

  // The collectives of the model's parallel plan, as traced: forward ones block the next op (a
  // row-parallel output feeds the residual add); their backward counterparts carry input
  // gradients, which the weight-gradient matmuls do not wait for (separate compute and collective
  // queues, compute-comm-overlap guide), except the expert all-to-alls, which the expert
  // matmuls' backward waits for.
  std::map<std::string, double> phase_collective_ns;  // blocking, per phase
  double backward_overlappable_ns = 0, backward_blocking_ns = 0;
  {
    std::map<std::tuple<std::string, std::string, int, double>, std::pair<double, size_t>> rows;
    for (const TracedOp* c : traced_collectives) {
      const auto [size, stride] = group_of(c->group, layout, workload);
      if (size <= 1) continue;
      const std::string name = c->group + " " + collective_kind_name(c->collective);
      const auto key = std::make_tuple(name, c->phase, static_cast<int>(c->collective), c->collective_bytes);
      auto it = rows.find(key);
      if (it == rows.end()) {
        const size_t i = add_collective(name + (c->phase == "draft" ? " (draft)" : ""), c->collective,
                                        c->collective_bytes, size, stride, 0);
        it = rows.emplace(key, std::make_pair(0.0, i)).first;
      }
      CollectiveCost& row = p.collectives[it->second.second];
      row.count += c->count;
      const double ns = c->count * row.ns_each;
      phase_collective_ns[c->phase] += ns;
      row.exposed_ns += ns;
      if (training && c->phase == "forward") {
        const CollectiveKind back = backward_of(c->collective);
        const double back_ns =
            c->count * collective_ns(back, c->collective_bytes, size, stride, instance, data, rank);
        (c->collective == CollectiveKind::kAllToAll ? backward_blocking_ns : backward_overlappable_ns) +=
            back_ns;
        row.count += c->count;  // and its backward counterpart
      }
    }
  }
  const std::string main_phase = training ? "forward"
                                 : workload.phase == Phase::kPrefill ? "prefill" : "decode";
  const double plan_forward_ns = phase_collective_ns[main_phase];
  // dX and dW matmuls have equal FLOPs: half the backward's matmul time is weight gradients.
  // Where the platform does not overlap them (Neuron's compiler does not yet: compute-comm-
  // overlap guide, "Fine-grained CC"), the input-gradient collectives block as the forward's do.
  const double plan_backward_ns =
      backward_blocking_ns +
      (eff.tp_backward_overlap ? std::max(0.0, backward_overlappable_ns - 0.5 * backward_matmul_ns)
                               : backward_overlappable_ns);
  const size_t plan_rows = p.collectives.size();
  if (training && plan_forward_ns > 0) {
    // The rows' exposed time per step: their forward share of the exposed forward, backward
    // (and, under full recompute, rerun forward) time of every micro-batch.
    const double per_microbatch = plan_forward_ns + plan_backward_ns +
                                  (layout.recompute == Recompute::kFull ? plan_forward_ns : 0);
    for (size_t i = 0; i < plan_rows; ++i) {
      p.collectives[i].exposed_ns *= per_microbatch / plan_forward_ns * layout.microbatches;
      p.collectives[i].count *= layout.microbatches;
    }
  }

  const int layers_per_stage = ceil_div(std::max(facts.layers, 1), layout.pp);
  // One micro-batch's activations on one rank: its 1/cp of the sequence (1/adp of the batch).
  const double act_message =
      workload.tokens_per_microbatch / layout.cp / layout.adp * facts.hidden * facts.activation_bytes;

  // Context parallelism: each layer gathers the keys and values of its cp peers (forward, and
  // again in the backward, which also reduce-scatters their gradients), streamed while the
  // attention works on the blocks already there: exposed only beyond the attention's time.
  double cp_forward = 0, cp_backward = 0;
  if (layout.cp > 1 && facts.kv_width > 0) {
    const double kv_bytes =
        2.0 * workload.tokens_per_microbatch * facts.kv_width * facts.activation_bytes;
    const auto ag = add_collective("cp all-gather (k, v)", CollectiveKind::kAllGather, kv_bytes,
                                   layout.cp, layout.tp, layers_per_stage * (training ? 2 : 1));
    double per_layer_fwd = p.collectives[ag].ns_each;
    double per_layer_bwd = 0;
    if (training) {
      const auto rs = add_collective("cp reduce-scatter (dk, dv)", CollectiveKind::kReduceScatter,
                                     kv_bytes, layout.cp, layout.tp, layers_per_stage);
      per_layer_bwd = p.collectives[ag].ns_each + p.collectives[rs].ns_each;
    }
    cp_forward = std::max(0.0, layers_per_stage * per_layer_fwd - attention_ns[main_phase]);
    cp_backward = std::max(0.0, layers_per_stage * per_layer_bwd - attention_ns["backward"]);
    p.collectives[ag].exposed_ns = (cp_forward + cp_backward) * (training ? layout.microbatches : 1);
    p.collectives[ag].count *= training ? layout.microbatches : 1;
  }
  // Pipeline: one activation send per stage boundary forward (and its gradient backward). The tp
  // ranks of a stage hold the same activation: each sends 1/tp of it and the next stage
  // all-gathers the pieces over its own links (Megatron's scatter-gather; sequence parallelism
  // holds it so already). A rank of an inner stage receives and sends once per micro-batch
  // each way; what it sends overlaps the next micro-batch's compute except the last's.
  double pp_send = 0;
  if (layout.pp > 1) {
    const double per_rank = training ? 2.0 * layout.microbatches : 1.0;
    const auto i = add_collective("pp send", CollectiveKind::kSend, act_message / layout.tp, 2,
                                  layout.tp * layout.cp, per_rank);
    pp_send = p.collectives[i].ns_each;
    if (layout.tp > 1) {
      const auto g = add_collective("pp gather", CollectiveKind::kAllGather, act_message,
                                    layout.tp, 1, per_rank);
      pp_send += p.collectives[g].ns_each;
    }
  }

  const double host_ns = !training && !workload.async_host ? eff.host_step_us * 1e3 : 0;
  auto add_part = [&](const std::string& name, double ns) {
    if (ns > 0) p.parts.push_back({name, ns});
  };

  if (training) {
    const double fwd = phase_ns("forward") + plan_forward_ns + cp_forward;
    const double bwd = phase_ns("backward") + plan_backward_ns + cp_backward;
    // Phases of other names (a user's script traced as one phase) run once per micro-batch too.
    double other = 0;
    for (const auto& [name, ph] : phases) {
      if (name != "forward" && name != "backward" && name != "optimizer") other += phase_ns(name);
    }
    for (auto& [name, ph] : phases) {
      if (name == "forward") ph.collective_ns = plan_forward_ns + cp_forward;
      if (name == "backward") ph.collective_ns = plan_backward_ns + cp_backward;
    }
    // Activation checkpointing reruns the layers' forward (their collectives included) before
    // their backward; selective recompute (Megatron-LM's and NxD's) reruns only the attention
    // core, whose inner activations it does not keep.
    const double recompute = layout.recompute == Recompute::kFull ? layer_forward_ns + plan_forward_ns
                             : layout.recompute == Recompute::kSelective ? layer_forward_attention_ns
                                                                         : 0;
    const double sends = layout.pp > 1 ? 2 * pp_send : 0;
    const double per_microbatch = fwd + recompute + bwd + other + sends;
    const double mb = layout.microbatches;
    // 1F1B: the pipeline fills and drains once per step: pp - 1 micro-batch slots idle.
    p.pipeline_bubble_ns = (layout.pp - 1) * per_microbatch;
    const double pipeline = mb * per_microbatch + p.pipeline_bubble_ns;
    for (auto& c : p.collectives) {
      if (c.name == "pp send" || c.name == "pp gather") c.exposed_ns = c.ns_each * c.count;
    }
    // Data parallelism: gradients are reduced over dp (and over cp, whose ranks hold the same
    // weights); FSDP gathers the parameters before forward and backward and reduce-scatters the
    // gradients; ZeRO-1 reduce-scatters the gradients and all-gathers the updated parameters.
    double dp_exposed = 0, param_gather = 0;
    const double grad_bytes = facts.params_per_rank * facts.gradient_bytes;
    double gradient_sync = 0;  // what must fit beside forward and backward
    const size_t first_dp = p.collectives.size();
    if (layout.dp > 1) {
      const int stride = layout.tp * layout.cp * layout.pp;
      if (layout.fsdp) {
        const auto ag = add_collective("fsdp all-gather", CollectiveKind::kAllGather, grad_bytes,
                                       layout.dp, stride, 2);
        const auto rs = add_collective("fsdp reduce-scatter", CollectiveKind::kReduceScatter,
                                       grad_bytes, layout.dp, stride, 1);
        gradient_sync = 2 * p.collectives[ag].ns_each + p.collectives[rs].ns_each;
      } else if (layout.zero1) {
        const auto rs = add_collective("zero1 reduce-scatter", CollectiveKind::kReduceScatter,
                                       grad_bytes, layout.dp, stride, 1);
        gradient_sync = p.collectives[rs].ns_each;
        // The updated shards are gathered after the optimizer step: nothing to hide behind.
        const auto ag = add_collective("zero1 all-gather", CollectiveKind::kAllGather,
                                       facts.params_per_rank * facts.weight_bytes, layout.dp, stride, 1);
        param_gather = p.collectives[ag].ns_each;
        p.collectives[ag].exposed_ns = param_gather;
      } else {
        const auto ar = add_collective("dp all-reduce", CollectiveKind::kAllReduce, grad_bytes,
                                       layout.dp, stride, 1);
        gradient_sync = p.collectives[ar].ns_each;
      }
    }
    if (layout.cp > 1) {
      const auto ar = add_collective("cp gradient all-reduce", CollectiveKind::kAllReduce,
                                     grad_bytes / (layout.fsdp ? layout.dp : 1), layout.cp,
                                     layout.tp, 1);
      gradient_sync += p.collectives[ar].ns_each;
    }
    if (p.collectives.size() > first_dp) {
      // Prefetched FSDP gathers and the gradients' reduction run beside forward and backward;
      // a plain (bucketed) reduction starts as gradients are ready: the last backward hides it.
      const double window = layout.fsdp ? mb * (fwd + bwd) : bwd;
      dp_exposed = std::max(0.0, gradient_sync - window);
      p.collectives[first_dp].exposed_ns = dp_exposed;
    }
    // A rank updates the parameters it holds the optimizer state of.
    const double opt = phase_ns("optimizer") / (layout.fsdp || layout.zero1 ? layout.dp : 1);
    p.step_ns = pipeline + dp_exposed + opt + param_gather;
    add_part("forward", mb * phase_ns("forward"));
    add_part("backward", mb * phase_ns("backward"));
    add_part("recompute", mb * recompute);
    add_part("other phases", mb * other);
    add_part("tp/ep collectives (exposed)", mb * (plan_forward_ns + plan_backward_ns));
    add_part("cp exchange (exposed)", mb * (cp_forward + cp_backward));
    add_part("pipeline sends", mb * sends);
    add_part("pipeline bubble", p.pipeline_bubble_ns);
    add_part("dp gradient sync (exposed)", dp_exposed);
    add_part("optimizer", opt);
    add_part("zero1 parameter gather", param_gather);
    p.tokens_per_step = workload.tokens_per_microbatch * mb * layout.dp;
    p.useful_flops_per_step = useful_flops * mb * p.ranks;

    // Memory: weights, gradients, optimizer state, and the activations of the micro-batches in
    // flight (1F1B keeps up to pp of them on the first stage).
    const double dp_shard = layout.fsdp ? layout.dp : 1;
    const double weights = facts.params_per_rank * facts.weight_bytes / dp_shard;
    const double grads = facts.params_per_rank * facts.gradient_bytes / dp_shard;
    const double states = facts.params_per_rank * facts.optimizer_bytes /
                          (layout.fsdp || layout.zero1 ? layout.dp : 1);
    const double per_mb_activations =
        layout.recompute == Recompute::kFull ? facts.layer_input_bytes_per_rank + facts.layer_activation_bytes
        : layout.recompute == Recompute::kSelective ? facts.selective_activation_bytes_per_rank
                                                    : facts.activation_bytes_per_rank;
    const double in_flight = layout.pp > 1 ? std::min(layout.microbatches, layout.pp) : 1;
    p.memory = {{"weights", weights},
                {"gradients", grads},
                {"optimizer state", states},
                {"activations", per_mb_activations * in_flight}};
  } else {
    // Prefill or decode: every stage runs in turn for the step's tokens.
    const double plan_draft_ns = phase_collective_ns["draft"];
    const double stage = phase_ns(main_phase) + phase_ns("draft") + plan_forward_ns + plan_draft_ns + cp_forward;
    for (auto& [name, ph] : phases) {
      if (name == main_phase) ph.collective_ns = plan_forward_ns + cp_forward;
      if (name == "draft") ph.collective_ns = plan_draft_ns;
    }
    const int k = workload.speculation;
    // Unfused speculation: each draft step is a program of its own, and a host round trip.
    const double draft_steps = !workload.fused_speculation && k > 0 ? k : 0;
    const double host = host_ns * (1 + draft_steps);
    p.step_ns = layout.pp * stage + (layout.pp - 1) * pp_send + host;
    // Per step: every stage's collectives run in turn.
    for (size_t i = 0; i < p.collectives.size(); ++i) {
      CollectiveCost& c = p.collectives[i];
      if (c.name == "pp send" || c.name == "pp gather") {
        c.count = layout.pp - 1;
        c.exposed_ns = c.ns_each * c.count;
      } else if (i >= plan_rows) {  // context parallelism
        c.exposed_ns = cp_forward * layout.pp;
        c.count *= layout.pp;
      } else {
        c.exposed_ns *= layout.pp;
        c.count *= layout.pp;
      }
    }
    add_part(main_phase, layout.pp * phase_ns(main_phase));
    add_part("draft", layout.pp * phase_ns("draft"));
    add_part("tp/ep collectives", layout.pp * (plan_forward_ns + plan_draft_ns));
    add_part("cp exchange (exposed)", layout.pp * cp_forward);
    add_part("pipeline sends", (layout.pp - 1) * pp_send);
    add_part("host loop", host);
    // Speculation: a step accepts each proposed token with probability a, stopping at the first
    // rejection, and always gains the target's own next token: E = (1 - a^(k+1)) / (1 - a).
    const double a = workload.acceptance;
    p.tokens_per_sequence_step = k > 0 ? (1 - std::pow(a, k + 1)) / (1 - a) : 1;
    p.tokens_per_step = workload.tokens_per_microbatch * layout.dp * layout.adp *
                        (workload.phase == Phase::kDecode ? p.tokens_per_sequence_step : 1);
    p.useful_flops_per_step = useful_flops * p.ranks;
    p.memory = {{"weights", facts.params_per_rank * facts.weight_bytes},
                {"KV cache", facts.kv_cache_bytes_per_rank * workload.kv_scale}};
    if (facts.draft_params_per_rank > 0) {
      p.memory.push_back({"draft weights", facts.draft_params_per_rank * facts.weight_bytes});
      p.memory.push_back({"draft KV cache", facts.draft_kv_cache_bytes_per_rank * workload.kv_scale});
    }
  }
  for (const auto& m : p.memory) p.hbm_bytes_per_rank += m.bytes;

  for (const auto& name : phase_order) {
    PhaseCost ph = phases[name];
    ph.ns = ph.compute_ns + ph.fixed_ns + ph.collective_ns;
    ph.bound = bound_of(ph.engine_ns, ph.fixed_ns, ph.collective_ns);
    const double per_step = training ? (name == "optimizer" ? 1.0 : layout.microbatches) : layout.pp;
    for (size_t e = 0; e < kEngineCount; ++e) p.engine_ns[e] += ph.engine_ns[e] * per_step;
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
  // The whole step's bound: the largest of the engines' totals, the exposed collectives and the
  // fixed costs (launches and the host loop).
  double collective_total = 0;
  for (const auto& c : p.collectives) collective_total += c.exposed_ns;
  double fixed_total = host_ns;
  for (const auto& ph : p.phases) {
    fixed_total += ph.fixed_ns * (training ? layout.microbatches : layout.pp);
  }
  p.bound = bound_of(p.engine_ns, fixed_total, collective_total);
  return p;
}

}  // namespace nrtsim::cost
