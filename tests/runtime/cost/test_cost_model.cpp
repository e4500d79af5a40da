// The projection's cost model against the rooflines its data files imply, computed here by hand
// from the same files' numbers.
#include <gtest/gtest.h>

#include <string>

#include "runtime/EngineModel.h"
#include "runtime/Error.h"
#include "runtime/IniFile.h"
#include "runtime/LinkModel.h"
#include "runtime/cost/CostData.h"
#include "runtime/cost/Projection.h"

namespace nrtsim::cost {
namespace {

std::string shipped(const std::string& file) {
  std::string path = NRTSIM_SHIPPED_ENGINE_MODEL;
  return path.substr(0, path.rfind('/') + 1) + file;
}

LinkModel shipped_links() { return load_link_model(NRTSIM_SHIPPED_LINK_MODEL); }

struct Shipped {
  CostData data = parse_cost_data(read_ini_file(shipped("estimate.ini")), "estimate.ini",
                                  shipped_links());
  std::map<std::string, CoreSpec> chips = load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL);
};
const Shipped& files() {
  static const Shipped s;
  return s;
}

TracedOp matmul(uint64_t flops, uint64_t bytes, const std::string& phase = "decode") {
  TracedOp op;
  op.op = "aten::mm";
  op.phase = phase;
  op.work.precision = Precision::kBf16;
  op.work[Engine::kTensor].ops = flops;
  op.work[Engine::kTensor].bytes_read = bytes;
  op.tensor_tile_ops = flops;
  return op;
}

TEST(CostData, ShippedFileHasTheInstancesAndSources) {
  const CostData& d = files().data;
  for (const char* name : {"trn1.32xlarge", "trn2.48xlarge", "trn3.48xlarge", "p5.48xlarge",
                           "p5en.48xlarge"}) {
    EXPECT_TRUE(d.instances.count(name)) << name;
    EXPECT_FALSE(d.instance(name).price_source.empty()) << name;
  }
  EXPECT_TRUE(d.instance("trn2.48xlarge").torus);
  EXPECT_EQ(d.instance("trn2.48xlarge").torus_x, 4);
  EXPECT_FALSE(d.instance("p5.48xlarge").torus);
  EXPECT_DOUBLE_EQ(d.gpu_spec("H200").hbm_gbytes_per_s, 4800);
  for (const auto& [name, link] : d.links) EXPECT_FALSE(link.source.empty()) << name;
  // A Trainium instance's links and EFA are its generation's, from the link model.
  EXPECT_EQ(d.instance("trn2.48xlarge").scale_up, "NeuronLink-v3");
  EXPECT_DOUBLE_EQ(d.instance("trn2.48xlarge").efa_gbits_per_s, 3200);
  EXPECT_DOUBLE_EQ(d.instance("trn1.32xlarge").efa_gbits_per_s, 800);
  EXPECT_DOUBLE_EQ(d.link("NeuronLink-v3").gbytes_per_s,
                   shipped_links().link("NeuronLink-v3").gbytes_per_s);
}

TEST(CostData, BadFilesNameTheProblem) {
  const std::string base =
      "[efficiency.trainium]\ntensor = 1\nhbm = 1\nlink = 1\n"
      "[efficiency.gpu]\ntensor = 1\nhbm = 1\nlink = 1\n";
  const LinkModel links = shipped_links();
  try {
    parse_cost_data(base + "[gpu.X]\nname = x\nbf16_tflops = 1\nfp8_tflops = 1\ntf32_tflops = 1\n"
                           "vector_tflops = 1\nhbm_gbytes = 1\nhbm_gbytes_per_s = 1\n"
                           "kernel_launch_us = 1\nsource = s\nbandwith = 3\n",
                    "t.ini", links);
    FAIL() << "a misspelt key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.ini:19: unknown key 'bandwith'"), std::string::npos)
        << e.what();
  }
  try {
    parse_cost_data(base + "[link.X]\ngbytes_per_s = 1\nhop_latency_us = 1\nsource = s\n", "t.ini",
                    links);
    FAIL() << "a link stated outside the link model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neuron_links.ini"), std::string::npos) << e.what();
  }
  try {
    parse_cost_data(base + "[instance.t]\naccelerator = Trainium2\ndevices = 16\n"
                           "topology = torus 4x4\nefa_gbits_per_s = 100\n"
                           "price_usd_per_hour = 1\nprice_source = s\n",
                    "t.ini", links);
    FAIL() << "a Trainium instance's EFA stated twice was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[chip.Trainium2]"), std::string::npos) << e.what();
  }
  try {
    parse_cost_data(base + "[instance.i]\naccelerator = H100\ndevices = 8\ntopology = switch\n"
                           "scale_up = NVLink\nscale_out = EFA\nefa_gbits_per_s = 1\n"
                           "price_usd_per_hour = 1\nprice_source = s\n",
                    "t.ini", links);
    FAIL() << "an unknown link was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown link 'NVLink'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_cost_data("[efficiency.gpu]\ntensor = -1\nhbm = 1\nlink = 1\n", "t.ini", links),
               Error);
  EXPECT_THROW(files().data.instance("trn9.huge"), Error);
}

TEST(RankModel, TrainiumMatmulRunsAtTheTensorEnginePeak) {
  const auto& f = files();
  const RankModel rank(f.data.instance("trn2.48xlarge"), f.data, f.chips);
  // LNC=2: two physical cores of 128 x 128 MACs at 2.4 GHz, 2 FLOPs per MAC.
  const double peak = 2.0 * 16384 * 2.4 * 2;
  EXPECT_DOUBLE_EQ(rank.peak_bf16_flops_per_ns(), peak);
  EXPECT_EQ(rank.ranks_per_device(), 4);
  EXPECT_DOUBLE_EQ(rank.hbm_capacity_bytes(), 96.0 * (1ull << 30) / 4);
  const auto busy = rank.busy_ns(matmul(1'000'000'000, 0));
  EXPECT_NEAR(busy[index_of(Engine::kTensor)], 1e9 / (peak * f.data.trainium.tensor), 1e-6);
  // Tile padding occupies the engine: twice the tiles, twice the time.
  TracedOp padded = matmul(1'000'000'000, 0);
  padded.tensor_tile_ops = 2'000'000'000;
  EXPECT_NEAR(rank.busy_ns(padded)[index_of(Engine::kTensor)], 2 * busy[index_of(Engine::kTensor)], 1e-6);
  // Streaming bytes run at the logical core's HBM share (2 x 362.5 GB/s) derated by the efficiency.
  const auto stream = rank.busy_ns(matmul(0, 1'000'000'000));
  EXPECT_NEAR(stream[index_of(Engine::kDma)], 1e9 / (2 * 362.5 * f.data.trainium.hbm), 1e-6);
}

TEST(RankModel, GpuIsARoofline) {
  const auto& f = files();
  const RankModel h100(f.data.instance("p5.48xlarge"), f.data, f.chips);
  const RankModel h200(f.data.instance("p5en.48xlarge"), f.data, f.chips);
  const auto compute = h100.busy_ns(matmul(989'000'000'000ull, 0));
  EXPECT_NEAR(compute[index_of(Engine::kTensor)], 1e6 / f.data.gpu.tensor, 1e-3);  // 1 ms / eff
  const auto memory = h200.busy_ns(matmul(0, 4'800'000'000ull));
  EXPECT_NEAR(memory[index_of(Engine::kDma)], 1e6 / f.data.gpu.hbm, 1e-3);
}

TEST(Collectives, RingOverNvlinkAndEfa) {
  const auto& f = files();
  const InstanceSpec& p5 = f.data.instance("p5.48xlarge");
  const RankModel rank(p5, f.data, f.chips);
  const double bytes = 1e9;
  const double bw = 450 * f.data.gpu.link;
  const double alpha = 2000;
  const double trigger = f.data.gpu.op_latency_us * 1e3;  // launch and completion of the collective
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllReduce, bytes, 8, 1, p5, f.data, rank),
              2 * 7.0 / 8 * bytes / bw + 2 * 7 * alpha + trigger, 1);
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllGather, bytes, 8, 1, p5, f.data, rank),
              7.0 / 8 * bytes / bw + 7 * alpha + trigger, 1);
  // Across 4 instances, one rank per instance: the NICs are shared by the instance's 8 ranks.
  const double efa = 3200.0 / 8 * f.data.gpu.link / 8;
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllReduce, bytes, 4, 8, p5, f.data, rank),
              2 * 3.0 / 4 * bytes / efa + 2 * 3 * 15000 + trigger, 1);
  EXPECT_EQ(collective_ns(CollectiveKind::kAllReduce, bytes, 1, 1, p5, f.data, rank), 0);
}

TEST(Collectives, TrainiumAlgorithmBySize) {
  // Neuron's intra-node algorithms: a mesh below 1 MB (2 steps per pass whatever the group),
  // recursive doubling-halving up to 56 MB (1 intra-chip + log2(chips) steps), rings beyond
  // (3 + 3 + 3 hops for 64 ranks: 4 per chip on a 4 x 4 torus). Latency per step from the file.
  const auto& f = files();
  const InstanceSpec& trn2 = f.data.instance("trn2.48xlarge");
  const RankModel rank(trn2, f.data, f.chips);
  const LinkSpec& link = f.data.link("NeuronLink-v3");
  const double alpha = link.hop_latency_us * 1e3;
  const double trigger = f.data.trainium.op_latency_us * 1e3;
  const double bw = link.gbytes_per_s * f.data.trainium.link / 4;  // the chip's links, 4 ranks
  auto all_reduce = [&](double bytes) {
    return collective_ns(CollectiveKind::kAllReduce, bytes, 64, 1, trn2, f.data, rank);
  };
  auto bandwidth = [&](double bytes) { return 2 * 63.0 / 64 * bytes / bw; };
  EXPECT_NEAR(all_reduce(32e3), bandwidth(32e3) + 2 * 2 * alpha + trigger, 1e-6);
  EXPECT_NEAR(all_reduce(8e6), bandwidth(8e6) + 2 * (1 + 4) * alpha + trigger, 1e-6);
  EXPECT_NEAR(all_reduce(100e6), bandwidth(100e6) + 2 * 9 * alpha + trigger, 1e-3);
  // A tiny all-reduce over 64 ranks costs microseconds, not tens of them.
  EXPECT_LT(all_reduce(1), 10'000);
}

TEST(Projection, DecodeStepIsComputePlusTpCollectives) {
  const auto& f = files();
  const InstanceSpec& p5 = f.data.instance("p5.48xlarge");
  const RankModel rank(p5, f.data, f.chips);
  ModelFacts facts;
  facts.layers = 4;
  facts.hidden = 1024;
  facts.params_per_rank = 1e6;
  Layout layout;
  layout.tp = 8;
  Workload w;
  w.training = false;
  w.tokens_per_microbatch = 2;
  const std::vector<TracedOp> ops = {matmul(0, 3'000'000'000ull), matmul(0, 3'000'000'000ull)};
  const Projection p = project(ops, facts, layout, w, p5, f.data, f.chips);
  // Two matmuls streaming 3 GB each, one program launch, each matmul's dependent-step latency.
  const double compute = 2 * 3e9 / (3350 * f.data.gpu.hbm) + rank.launch_ns(LaunchKind::kProgram) +
                         2 * f.data.gpu.op_latency_us * 1e3;
  const double ar = collective_ns(CollectiveKind::kAllReduce, 2.0 * 1024 * 2, 8, 1, p5, f.data, rank);
  EXPECT_NEAR(p.step_ns, compute + 2 * 4 * ar, 1);
  EXPECT_NEAR(p.tokens_per_s, 2 / (p.step_ns * 1e-9), 1e-6);
  EXPECT_EQ(p.instances, 1);
  EXPECT_NEAR(p.usd_per_million_tokens, 39.33 / 3600 / p.tokens_per_s * 1e6, 1e-9);
  EXPECT_EQ(p.phases.at(0).bound, "dma (HBM)");
  EXPECT_DOUBLE_EQ(p.hbm_bytes_per_rank, 2e6);
}

TEST(Projection, TrainingPipelineBubbleAndHiddenDataParallelism) {
  const auto& f = files();
  const InstanceSpec& trn1 = f.data.instance("trn1.32xlarge");
  ModelFacts facts;
  facts.layers = 8;
  facts.hidden = 512;
  facts.params_per_rank = 1e3;  // a tiny all-reduce hides behind the backward
  Layout layout;
  layout.pp = 2;
  layout.dp = 4;
  layout.microbatches = 6;
  Workload w;
  w.tokens_per_microbatch = 1024;
  const std::vector<TracedOp> ops = {matmul(1'000'000'000'000ull, 0, "forward"),
                                     matmul(2'000'000'000'000ull, 0, "backward")};
  const Projection p = project(ops, facts, layout, w, trn1, f.data, f.chips);
  const RankModel rank(trn1, f.data, f.chips);
  const double latency = f.data.trainium.op_latency_us * 1e3;
  const double fwd = 1e12 / rank.peak_bf16_flops_per_ns() + rank.launch_ns(LaunchKind::kProgram) + latency;
  const double bwd = 2e12 / rank.peak_bf16_flops_per_ns() + rank.launch_ns(LaunchKind::kProgram) + latency;
  const double send = collective_ns(CollectiveKind::kSend, 1024.0 * 512 * 2, 2, 1, trn1, f.data, rank);
  EXPECT_NEAR(p.step_ns, (6 + 2 - 1) * (fwd + bwd + 2 * send), 1);
  EXPECT_NEAR(p.pipeline_bubble_ns, fwd + bwd + 2 * send, 1);
  EXPECT_NEAR(p.mfu, 3e12 * 6 * 8 / (p.step_ns * 8 * rank.peak_bf16_flops_per_ns()), 1e-12);
  EXPECT_EQ(p.instances, 1);  // 8 ranks of 32
}

TEST(Projection, CompiledProgramsFuseElementwiseTraffic) {
  // A Vector-engine op reading 2 GB and writing 1 GB: compiled, only its output crosses HBM
  // (its inputs were a neighbour's outputs); eager, all 3 GB do and it pays a launch.
  const auto& f = files();
  const InstanceSpec& trn2 = f.data.instance("trn2.48xlarge");
  const RankModel rank(trn2, f.data, f.chips);
  TracedOp op;
  op.op = "aten::mul.Tensor";
  op.phase = "decode";
  op.work.precision = Precision::kBf16;
  op.work[Engine::kVector].ops = 1000;
  op.work[Engine::kVector].bytes_read = 2'000'000'000ull;
  op.work[Engine::kVector].bytes_written = 1'000'000'000ull;
  ModelFacts facts;
  facts.layers = 1;
  facts.hidden = 8;
  Layout layout;
  Workload w;
  w.training = false;
  w.tokens_per_microbatch = 1;
  const double bw = rank.hbm_bytes_per_ns() * f.data.trainium.hbm;
  const Projection compiled = project({op}, facts, layout, w, trn2, f.data, f.chips);
  // ... plus one Vector-engine instruction's static overhead (it waits on its producer).
  const double overhead = f.data.trainium.instruction_overhead_cycles / f.chips.at("Trainium2").vector_clock_ghz;
  EXPECT_GT(overhead, 0);
  EXPECT_NEAR(compiled.step_ns, 1e9 / bw + rank.launch_ns(LaunchKind::kProgram) + overhead, 1);
  w.compiled = false;
  const Projection eager = project({op}, facts, layout, w, trn2, f.data, f.chips);
  EXPECT_NEAR(eager.step_ns, 3e9 / bw + rank.launch_ns(LaunchKind::kKernel), 1);
}

TEST(Projection, BackwardTpCollectivesOverlapWeightGradients) {
  // One layer, TP8 inside one p5: the forward all-reduces block; the backward ones run beside the
  // weight-gradient half of the backward matmuls and are exposed only beyond it.
  const auto& f = files();
  const InstanceSpec& p5 = f.data.instance("p5.48xlarge");
  const RankModel rank(p5, f.data, f.chips);
  ModelFacts facts;
  facts.layers = 1;
  facts.hidden = 4096;
  facts.params_per_rank = 1;
  Layout layout;
  layout.tp = 8;
  Workload w;
  w.tokens_per_microbatch = 8192;
  const double ar = collective_ns(CollectiveKind::kAllReduce, 8192.0 * 4096 * 2, 8, 1, p5, f.data, rank);
  const double peak = 989 * 1e3 * f.data.gpu.tensor;  // FLOP per ns
  // Backward matmuls long enough to hide both all-reduces behind their weight-gradient half.
  const uint64_t big = static_cast<uint64_t>(2 * 2 * ar * peak * 1.5);
  const std::vector<TracedOp> ops = {matmul(1000, 0, "forward"), matmul(big, 0, "backward")};
  const Projection p = project(ops, facts, layout, w, p5, f.data, f.chips);
  const double launch = rank.launch_ns(LaunchKind::kProgram) + f.data.gpu.op_latency_us * 1e3;
  const double fwd = 1000 / peak + launch + 2 * ar;
  const double bwd = big / peak + launch;
  EXPECT_NEAR(p.step_ns, fwd + bwd, 1);
  // A short backward hides only its weight-gradient half: the rest is exposed.
  const uint64_t small = static_cast<uint64_t>(ar * peak);  // dW half = ar / 2
  const Projection q = project({matmul(1000, 0, "forward"), matmul(small, 0, "backward")}, facts,
                               layout, w, p5, f.data, f.chips);
  EXPECT_NEAR(q.step_ns, fwd + small / peak + launch + (2 * ar - small / peak / 2), 1);
}

TEST(Projection, ContextParallelAttentionSeesTheWholeSequence) {
  // cp = 2: the traced attention (its half of the queries against its half of the keys) is
  // widened to all the keys; the key/value all-gather hides behind it when it is long enough.
  const auto& f = files();
  const InstanceSpec& p5 = f.data.instance("p5.48xlarge");
  TracedOp attention = matmul(4'000'000'000'000ull, 0, "forward");
  attention.op = "aten::_scaled_dot_product_fused_attention_overrideable";
  attention.attention = true;
  ModelFacts facts;
  facts.layers = 1;
  facts.hidden = 1024;
  facts.params_per_rank = 1;
  facts.kv_width = 128;
  Workload w;
  w.tokens_per_microbatch = 4096;
  Layout one;
  Layout cp2;
  cp2.cp = 2;
  const Projection a = project({attention}, facts, one, w, p5, f.data, f.chips);
  const Projection b = project({attention}, facts, cp2, w, p5, f.data, f.chips);
  const double peak = 989 * 1e3 * f.data.gpu.tensor;
  EXPECT_NEAR(b.phases.at(0).compute_ns - a.phases.at(0).compute_ns, 4e12 / peak, 1);
  EXPECT_EQ(b.ranks, 2);
  EXPECT_EQ(b.collectives.at(0).name, "cp all-gather (k, v)");
  EXPECT_DOUBLE_EQ(b.collectives.at(0).bytes, 2.0 * 4096 * 128 * 2);
  // The forward exchange hides behind the forward attention; this trace has no backward
  // attention, so the backward's gather and reduce-scatter are exposed.
  EXPECT_EQ(b.collectives.at(1).name, "cp reduce-scatter (dk, dv)");
  EXPECT_NEAR(b.collectives.at(0).exposed_ns,
              b.collectives.at(0).ns_each + b.collectives.at(1).ns_each, 1e-6);
  EXPECT_DOUBLE_EQ(b.tokens_per_step, a.tokens_per_step);  // two ranks share one sequence
}

TEST(Projection, RecomputeRerunsTheForwardAndKeepsLayerInputs) {
  const auto& f = files();
  const InstanceSpec& trn2 = f.data.instance("trn2.48xlarge");
  ModelFacts facts;
  facts.layers = 10;
  facts.hidden = 1000;
  facts.params_per_rank = 1;
  facts.activation_bytes_per_rank = 1e9;
  Workload w;
  w.tokens_per_microbatch = 100;
  Layout plain;
  Layout ac;
  ac.recompute = true;
  const std::vector<TracedOp> ops = {matmul(1'000'000'000'000ull, 0, "forward"),
                                     matmul(2'000'000'000'000ull, 0, "backward")};
  const Projection a = project(ops, facts, plain, w, trn2, f.data, f.chips);
  const Projection b = project(ops, facts, ac, w, trn2, f.data, f.chips);
  EXPECT_NEAR(b.step_ns - a.step_ns, a.phases.at(0).ns, 1);
  EXPECT_DOUBLE_EQ(b.useful_flops_per_step, a.useful_flops_per_step);  // recomputation is not useful
  const double states = 1 * (2.0 * 2 + 12);
  EXPECT_DOUBLE_EQ(a.hbm_bytes_per_rank, states + 1e9);
  EXPECT_DOUBLE_EQ(b.hbm_bytes_per_rank, states + 10 * 100.0 * 1000 * 2 + 1e9 / 10);
}

TEST(RankModel, Fp8TrainingRunsMatmulsAtTheFp8Rate) {
  const auto& f = files();
  const RankModel trn2(f.data.instance("trn2.48xlarge"), f.data, f.chips);
  const RankModel h100(f.data.instance("p5.48xlarge"), f.data, f.chips);
  const TracedOp mm = matmul(1'000'000'000'000ull, 0);
  const size_t t = index_of(Engine::kTensor);
  EXPECT_NEAR(trn2.busy_ns(mm)[t] / trn2.busy_ns(mm, true)[t], f.chips.at("Trainium2").tensor_fp8_speedup, 1e-9);
  EXPECT_NEAR(h100.busy_ns(mm)[t] / h100.busy_ns(mm, true)[t], 1979.0 / 989, 1e-9);
}

}  // namespace
}  // namespace nrtsim::cost
