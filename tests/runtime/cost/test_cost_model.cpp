// The projection's cost model against the rooflines its data files imply, computed here by hand
// from the same files' numbers.
#include <gtest/gtest.h>

#include <string>

#include "runtime/EngineModel.h"
#include "runtime/Error.h"
#include "runtime/cost/CostData.h"
#include "runtime/cost/Projection.h"

namespace nrtsim::cost {
namespace {

std::string shipped(const std::string& file) {
  std::string path = NRTSIM_SHIPPED_ENGINE_MODEL;
  return path.substr(0, path.rfind('/') + 1) + file;
}

struct Shipped {
  CostData data = load_cost_data(shipped("estimate.ini"));
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
}

TEST(CostData, BadFilesNameTheProblem) {
  const std::string base =
      "[efficiency.trainium]\ntensor = 1\nhbm = 1\nlink = 1\n"
      "[efficiency.gpu]\ntensor = 1\nhbm = 1\nlink = 1\n";
  try {
    parse_cost_data(base + "[link.X]\ngbytes_per_s = 1\nhop_latency_us = 1\nsource = s\nbandwith = 3\n",
                    "t.ini");
    FAIL() << "a misspelt key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.ini:13: unknown key 'bandwith'"), std::string::npos)
        << e.what();
  }
  try {
    parse_cost_data(base + "[instance.i]\naccelerator = H100\ndevices = 8\ntopology = switch\n"
                           "scale_up = NVLink\nscale_out = EFA\nefa_gbits_per_s = 1\n"
                           "price_usd_per_hour = 1\nprice_source = s\n",
                    "t.ini");
    FAIL() << "an unknown link was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown link 'NVLink'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_cost_data("[efficiency.gpu]\ntensor = -1\nhbm = 1\nlink = 1\n", "t.ini"), Error);
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
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllReduce, bytes, 8, 1, p5, f.data, rank),
              2 * 7.0 / 8 * bytes / bw + 2 * 7 * alpha, 1);
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllGather, bytes, 8, 1, p5, f.data, rank),
              7.0 / 8 * bytes / bw + 7 * alpha, 1);
  // Across 4 instances, one rank per instance: the NICs are shared by the instance's 8 ranks.
  const double efa = 3200.0 / 8 * f.data.gpu.link / 8;
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllReduce, bytes, 4, 8, p5, f.data, rank),
              2 * 3.0 / 4 * bytes / efa + 2 * 3 * 15000, 1);
  EXPECT_EQ(collective_ns(CollectiveKind::kAllReduce, bytes, 1, 1, p5, f.data, rank), 0);
}

TEST(Collectives, TrainiumTorusHops) {
  const auto& f = files();
  const InstanceSpec& trn2 = f.data.instance("trn2.48xlarge");
  const RankModel rank(trn2, f.data, f.chips);
  // 64 ranks: 4 per chip, 16 chips on a 4 x 4 torus: 3 + 3 + 3 hops; a tiny message pays latency.
  const double t = collective_ns(CollectiveKind::kAllReduce, 1, 64, 1, trn2, f.data, rank);
  EXPECT_NEAR(t, 2 * 9 * 1300, 1);
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
  const double compute = 2 * 3e9 / (3350 * f.data.gpu.hbm) + rank.launch_ns(LaunchKind::kProgram);
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
  const double fwd = 1e12 / rank.peak_bf16_flops_per_ns() + rank.launch_ns(LaunchKind::kProgram);
  const double bwd = 2e12 / rank.peak_bf16_flops_per_ns() + rank.launch_ns(LaunchKind::kProgram);
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
  EXPECT_NEAR(compiled.step_ns, 1e9 / bw + rank.launch_ns(LaunchKind::kProgram), 1);
  w.compiled = false;
  const Projection eager = project({op}, facts, layout, w, trn2, f.data, f.chips);
  EXPECT_NEAR(eager.step_ns, 3e9 / bw + rank.launch_ns(LaunchKind::kKernel), 1);
}

}  // namespace
}  // namespace nrtsim::cost
