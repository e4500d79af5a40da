// The projection's cost model against the rooflines its data files imply, computed here by hand
// from the same files' numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/EngineModel.h"
#include "runtime/Error.h"
#include "runtime/IniFile.h"
#include "runtime/LinkModel.h"
#include "runtime/cost/CostData.h"
#include "runtime/cost/LayerSplit.h"
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
      "[efficiency.trainium]\ntensor = 1\nhbm = 1\n"
      "[efficiency.gpu]\ntensor = 1\nhbm = 1\n";
  const LinkModel links = shipped_links();
  try {
    parse_cost_data(base + "[gpu.X]\nname = x\nbf16_tflops = 1\nfp8_tflops = 1\ntf32_tflops = 1\n"
                           "vector_tflops = 1\nhbm_gbytes = 1\nhbm_gbytes_per_s = 1\n"
                           "kernel_launch_us = 1\nsource = s\nbandwith = 3\n",
                    "t.ini", links);
    FAIL() << "a misspelt key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.ini:17: unknown key 'bandwith'"), std::string::npos)
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
  EXPECT_THROW(parse_cost_data("[efficiency.gpu]\ntensor = -1\nhbm = 1\n", "t.ini", links),
               Error);
  // A link's efficiency stated here as well as in the link model: refused, naming where it lives.
  try {
    parse_cost_data("[efficiency.trainium]\ntensor = 1\nhbm = 1\nlink = 0.8\n"
                    "[efficiency.gpu]\ntensor = 1\nhbm = 1\n",
                    "t.ini", links);
    FAIL() << "a link efficiency outside the link model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.ini:4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("neuron_links.ini"), std::string::npos) << e.what();
  }
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

TEST(Collectives, NcclOverNvswitchAndRingsOverEfa) {
  // Training (NCCL): a ring of 7 steps per pass, or NVLink SHARP where the switch reduces (each
  // byte sent once, received once); the tuner takes the faster. Between instances: a ring over
  // the instance's NICs.
  const auto& f = files();
  const InstanceSpec& p5 = f.data.instance("p5.48xlarge");
  const LinkSpec& nvlink = f.data.link(p5.scale_up);
  const RankModel rank(p5, f.data, f.chips);
  const double bytes = 1e9;
  const double bw = nvlink.gbytes_per_s * nvlink.efficiency;
  const double alpha = nvlink.hop_latency_us * 1e3;
  const double trigger = f.data.gpu.op_latency_us * 1e3;  // launch and completion of the collective
  const double ring = 2 * 7.0 / 8 * bytes / bw + 2 * 7 * alpha;
  const double nvls = bytes / bw + 2 * alpha;
  EXPECT_TRUE(nvlink.multicast);
  std::string over;
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllReduce, bytes, 8, 1, p5, f.data, rank, &over),
              std::min(ring, nvls) + trigger, 1);
  EXPECT_NE(over.find("NVLS"), std::string::npos) << over;
  // A tiny all-reduce: the ring's 14 steps cost more than NVLS's 2.
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllReduce, 1e3, 8, 1, p5, f.data, rank),
              1e3 / bw + 2 * alpha + trigger, 1e-6);
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllGather, bytes, 8, 1, p5, f.data, rank),
              7.0 / 8 * bytes / bw + alpha + trigger, 1);
  // Across 4 instances, one rank per instance: the NICs are shared by the instance's 8 ranks.
  const double efa = p5.efa_gbits_per_s / 8 * f.data.link(p5.scale_out).efficiency / 8;
  const double efa_alpha = f.data.link(p5.scale_out).hop_latency_us * 1e3;
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllReduce, bytes, 4, 8, p5, f.data, rank),
              2 * 3.0 / 4 * bytes / efa + 2 * 3 * efa_alpha + trigger, 1);
  EXPECT_EQ(collective_ns(CollectiveKind::kAllReduce, bytes, 1, 1, p5, f.data, rank), 0);
}

TEST(Collectives, ServingAllReduceIsOneShotThenTwoShotThenNccl) {
  // TensorRT-LLM's custom all-reduce on NVSwitch: one-shot (every GPU reads all peers' buffers,
  // one step) for small messages, two-shot (reduce-scatter + all-gather through peer memory, two
  // steps) below its workspace, NCCL above.
  const auto& f = files();
  const InstanceSpec& p5 = f.data.instance("p5.48xlarge");
  const LinkSpec& nvlink = f.data.link(p5.scale_up);
  const RankModel rank(p5, f.data, f.chips);
  const double bw = nvlink.gbytes_per_s * nvlink.efficiency;
  const double alpha = nvlink.hop_latency_us * 1e3;
  const double trigger = f.data.gpu.op_latency_us * 1e3;
  ASSERT_GT(nvlink.one_shot_below_mbytes, 0);
  ASSERT_GT(nvlink.two_shot_below_mbytes, nvlink.one_shot_below_mbytes);
  auto serve = [&](double bytes, std::string* over) {
    return collective_ns(CollectiveKind::kAllReduce, bytes, 8, 1, p5, f.data, rank, over, true);
  };
  std::string over;
  const double small = 16e3;  // a decode step's activation: 8192 x bf16
  EXPECT_NEAR(serve(small, &over), 7 * small / bw + alpha + trigger, 1e-6);
  EXPECT_NE(over.find("one-shot"), std::string::npos) << over;
  const double medium = nvlink.one_shot_below_mbytes * 1e6 * 2;
  EXPECT_NEAR(serve(medium, &over), 2 * 7.0 / 8 * medium / bw + 2 * alpha + trigger, 1e-3);
  EXPECT_NE(over.find("two-shot"), std::string::npos) << over;
  const double large = nvlink.two_shot_below_mbytes * 1e6 * 2;
  EXPECT_NEAR(serve(large, &over),
              collective_ns(CollectiveKind::kAllReduce, large, 8, 1, p5, f.data, rank), 1e-6);
  // One-shot beats a 14-step ring at decode sizes by the ring's extra steps.
  EXPECT_LT(serve(small, nullptr) + 12 * alpha,
            2 * 7.0 / 8 * small / bw + 2 * 7 * alpha + trigger);
}

TEST(Collectives, TrainiumAlgorithmBySize) {
  // Neuron's intra-node algorithms ([CC-INTRA], neuron_links.ini): a mesh below 1 MB (2 steps per
  // pass whatever the group), recursive doubling-halving up to 56 MB (1 intra-chip + log2(chips)
  // steps), beyond: KangaRing for a group holding every rank of its chips (64 ranks, 4 per chip:
  // 32 on the cycle, 31 steps), the ring for one rank per chip (16 ranks: 15 steps). Latency per
  // step and the links' sustained fraction from the link model.
  const auto& f = files();
  const InstanceSpec& trn2 = f.data.instance("trn2.48xlarge");
  const RankModel rank(trn2, f.data, f.chips);
  const LinkSpec& link = f.data.link("NeuronLink-v3");
  const double alpha = link.hop_latency_us * 1e3;
  const double trigger = f.data.trainium.op_latency_us * 1e3;
  const double bw = link.gbytes_per_s * link.efficiency / 4;  // the chip's links, 4 ranks
  auto all_reduce = [&](double bytes) {
    return collective_ns(CollectiveKind::kAllReduce, bytes, 64, 1, trn2, f.data, rank);
  };
  auto bandwidth = [&](double bytes) { return 2 * 63.0 / 64 * bytes / bw; };
  EXPECT_NEAR(all_reduce(32e3), bandwidth(32e3) + 2 * 2 * alpha + trigger, 1e-6);
  EXPECT_NEAR(all_reduce(8e6), bandwidth(8e6) + 2 * (1 + 4) * alpha + trigger, 1e-6);
  std::string over;
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllReduce, 100e6, 64, 1, trn2, f.data, rank, &over),
              bandwidth(100e6) + 2 * 31 * alpha + trigger, 1e-3);
  EXPECT_NE(over.find("kangaring"), std::string::npos) << over;
  // One rank per chip (a data-parallel group strided by 4): the flat ring, 15 steps per pass.
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllReduce, 100e6, 16, 4, trn2, f.data, rank, &over),
              2 * 15.0 / 16 * 100e6 / bw + 2 * 15 * alpha + trigger, 1e-3);
  EXPECT_NE(over.find("(ring)"), std::string::npos) << over;
  // A tiny all-reduce over 64 ranks costs microseconds, not tens of them.
  EXPECT_LT(all_reduce(1), 10'000);
  // Inside one chip the group moves through HBM at the core's rate, each byte read and written.
  EXPECT_NEAR(collective_ns(CollectiveKind::kAllGather, 1e6, 4, 1, trn2, f.data, rank),
              3.0 / 4 * 1e6 / (rank.hbm_bytes_per_ns() / 2) + 3 * alpha + trigger, 1e-6);
}

TracedOp collective(double bytes, double count, const std::string& phase = "decode",
                    const std::string& group = "tp",
                    CollectiveKind kind = CollectiveKind::kAllReduce) {
  TracedOp op;
  op.op = "model.layers.*.mlp.down_proj";
  op.phase = phase;
  op.kind = LaunchKind::kCollective;
  op.collective = kind;
  op.group = group;
  op.collective_bytes = bytes;
  op.count = count;
  return op;
}

double parts_sum(const Projection& p) {
  double sum = 0;
  for (const auto& part : p.parts) sum += part.ns;
  return sum;
}

TEST(Projection, DecodeStepIsComputePlusTracedTpCollectives) {
  const auto& f = files();
  const InstanceSpec& p5 = f.data.instance("p5.48xlarge");
  const RankModel rank(p5, f.data, f.chips);
  ModelFacts facts;
  facts.layers = 4;
  facts.hidden = 1024;
  facts.params_per_rank = 1e6;
  facts.kv_cache_bytes_per_rank = 3e6;
  Layout layout;
  layout.tp = 8;
  Workload w;
  w.phase = Phase::kDecode;
  w.tokens_per_microbatch = 2;
  // Two matmuls per layer of 4, and the plan's two all-reduces per layer, as traced.
  TracedOp mm = matmul(0, 3'000'000'000ull);
  mm.count = 4;
  const std::vector<TracedOp> ops = {mm, collective(2.0 * 1024 * 2, 8)};
  const Projection p = project(ops, facts, layout, w, p5, f.data, f.chips);
  const double compute = 4 * 3e9 / (3350 * f.data.gpu.hbm) + rank.launch_ns(LaunchKind::kProgram) +
                         4 * f.data.gpu.op_latency_us * 1e3;
  // A serving engine's all-reduce (one-shot at this size).
  const double ar =
      collective_ns(CollectiveKind::kAllReduce, 2.0 * 1024 * 2, 8, 1, p5, f.data, rank, nullptr, true);
  EXPECT_NEAR(p.step_ns, compute + 8 * ar, 1);
  EXPECT_NEAR(parts_sum(p), p.step_ns, 1e-6);
  EXPECT_NEAR(p.tokens_per_s, 2 / (p.step_ns * 1e-9), 1e-6);
  EXPECT_EQ(p.instances, 1);
  EXPECT_NEAR(p.usd_per_million_tokens, p5.price_usd_per_hour / 3600 / p.tokens_per_s * 1e6, 1e-9);
  EXPECT_EQ(p.phases.at(0).bound, "dma (HBM)");
  EXPECT_DOUBLE_EQ(p.hbm_bytes_per_rank, 2e6 + 3e6);  // bf16 weights + KV cache
  EXPECT_EQ(p.collectives.at(0).name, "tp all-reduce");
  EXPECT_DOUBLE_EQ(p.collectives.at(0).count, 8);
}

TEST(Projection, QuantizedWeightsStreamFewerBytes) {
  // FP8 / int8 weights of a bf16 model: the matmul's weight reads halve, and so does the
  // weights' HBM.
  const auto& f = files();
  const InstanceSpec& trn2 = f.data.instance("trn2.48xlarge");
  const RankModel rank(trn2, f.data, f.chips);
  TracedOp mm = matmul(0, 2'000'000'000ull);
  mm.weight_bytes_read = 1'000'000'000ull;  // half of what it reads is weights
  ModelFacts facts;
  facts.layers = 1;
  facts.hidden = 8;
  facts.params_per_rank = 5e8;
  Layout layout;
  Workload w;
  w.phase = Phase::kDecode;
  w.tokens_per_microbatch = 1;
  const Projection bf16 = project({mm}, facts, layout, w, trn2, f.data, f.chips);
  w.weight_scale = 0.5;
  facts.weight_bytes = 1;
  const Projection int8 = project({mm}, facts, layout, w, trn2, f.data, f.chips);
  const double bw = rank.hbm_bytes_per_ns() * f.data.trainium.hbm;
  EXPECT_NEAR(bf16.step_ns - int8.step_ns, 0.5e9 / bw, 1);
  EXPECT_DOUBLE_EQ(bf16.hbm_bytes_per_rank, 1e9);
  EXPECT_DOUBLE_EQ(int8.hbm_bytes_per_rank, 5e8);
}

TEST(Projection, SpeculativeDecodingCountsTheDraftAndTheAcceptedTokens) {
  // k = 4 draft steps per step, acceptance 0.5: E = (1 - 0.5^5) / 0.5 = 1.9375 tokens per step.
  // Fused: the draft's ops join the target's program (no launch of their own).
  const auto& f = files();
  const InstanceSpec& trn2 = f.data.instance("trn2.48xlarge");
  const RankModel rank(trn2, f.data, f.chips);
  TracedOp target = matmul(0, 1'000'000'000ull);
  TracedOp draft = matmul(0, 100'000'000ull, "draft");
  draft.count = 4;
  ModelFacts facts;
  facts.layers = 1;
  facts.hidden = 8;
  Layout layout;
  Workload w;
  w.phase = Phase::kDecode;
  w.tokens_per_microbatch = 1;
  w.speculation = 4;
  w.acceptance = 0.5;
  const Projection p = project({target, draft}, facts, layout, w, trn2, f.data, f.chips);
  const double bw = rank.hbm_bytes_per_ns() * f.data.trainium.hbm;
  const double latency = f.data.trainium.op_latency_us * 1e3;
  EXPECT_NEAR(p.step_ns, 1e9 / bw + 4 * 1e8 / bw + 5 * latency + rank.launch_ns(LaunchKind::kProgram), 1);
  EXPECT_DOUBLE_EQ(p.tokens_per_sequence_step, (1 - std::pow(0.5, 5)) / 0.5);
  EXPECT_NEAR(p.tokens_per_s, p.tokens_per_sequence_step / (p.step_ns * 1e-9), 1e-6);
  // Unfused: every draft step is a program of its own.
  w.fused_speculation = false;
  const Projection q = project({target, draft}, facts, layout, w, trn2, f.data, f.chips);
  EXPECT_NEAR(q.step_ns - p.step_ns, rank.launch_ns(LaunchKind::kProgram), 1e-6);
}

TEST(Projection, SynchronousHostLoopPaysTheHostStep) {
  const auto& f = files();
  const InstanceSpec& trn2 = f.data.instance("trn2.48xlarge");
  ASSERT_GT(f.data.trainium.host_step_us, 0);
  ModelFacts facts;
  facts.layers = 1;
  facts.hidden = 8;
  Layout layout;
  Workload w;
  w.phase = Phase::kDecode;
  w.tokens_per_microbatch = 1;
  const std::vector<TracedOp> ops = {matmul(0, 1'000'000)};
  const Projection overlapped = project(ops, facts, layout, w, trn2, f.data, f.chips);
  w.async_host = false;
  const Projection sync = project(ops, facts, layout, w, trn2, f.data, f.chips);
  EXPECT_NEAR(sync.step_ns - overlapped.step_ns, f.data.trainium.host_step_us * 1e3, 1e-6);
  EXPECT_EQ(sync.parts.back().name, "host loop");
  EXPECT_NEAR(parts_sum(sync), sync.step_ns, 1e-6);
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
  const double fwd = 1e12 / (rank.peak_bf16_flops_per_ns() * f.data.trainium.tensor) + rank.launch_ns(LaunchKind::kProgram) + latency;
  const double bwd = 2e12 / (rank.peak_bf16_flops_per_ns() * f.data.trainium.tensor) + rank.launch_ns(LaunchKind::kProgram) + latency;
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
  w.phase = Phase::kDecode;
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
  const TracedOp ars = collective(8192.0 * 4096 * 2, 2, "forward");
  const std::vector<TracedOp> ops = {matmul(1000, 0, "forward"), matmul(big, 0, "backward"), ars};
  const Projection p = project(ops, facts, layout, w, p5, f.data, f.chips);
  const double launch = rank.launch_ns(LaunchKind::kProgram) + f.data.gpu.op_latency_us * 1e3;
  const double fwd = 1000 / peak + launch + 2 * ar;
  const double bwd = big / peak + launch;
  EXPECT_NEAR(p.step_ns, fwd + bwd, 1);
  // A short backward hides only its weight-gradient half: the rest is exposed.
  const uint64_t small = static_cast<uint64_t>(ar * peak);  // dW half = ar / 2
  const Projection q = project({matmul(1000, 0, "forward"), matmul(small, 0, "backward"), ars},
                               facts, layout, w, p5, f.data, f.chips);
  EXPECT_NEAR(q.step_ns, fwd + small / peak + launch + (2 * ar - small / peak / 2), 1);
}

TEST(Projection, TrainiumBackwardTpCollectivesBlock) {
  // Neuron's compiler does not overlap TP collectives with compute (compute-comm-overlap guide):
  // the backward's all-reduces are exposed in full however long the weight-gradient matmuls.
  const auto& f = files();
  const InstanceSpec& trn2 = f.data.instance("trn2.48xlarge");
  ASSERT_FALSE(f.data.trainium.tp_backward_overlap);
  const RankModel rank(trn2, f.data, f.chips);
  ModelFacts facts;
  facts.layers = 1;
  facts.hidden = 4096;
  facts.params_per_rank = 1;
  Layout layout;
  layout.tp = 8;
  Workload w;
  w.tokens_per_microbatch = 8192;
  const double bytes = 8192.0 * 4096 * 2;
  const double ar = collective_ns(CollectiveKind::kAllReduce, bytes, 8, 1, trn2, f.data, rank);
  const std::vector<TracedOp> plain = {matmul(1000, 0, "forward"), matmul(1'000'000'000'000ull, 0, "backward")};
  std::vector<TracedOp> with = plain;
  with.push_back(collective(bytes, 2, "forward"));
  const Projection a = project(plain, facts, layout, w, trn2, f.data, f.chips);
  const Projection b = project(with, facts, layout, w, trn2, f.data, f.chips);
  EXPECT_NEAR(b.step_ns - a.step_ns, 4 * ar, 1);
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
  ac.recompute = Recompute::kFull;
  facts.layer_input_bytes_per_rank = 2e6;
  facts.layer_activation_bytes = 1e8;
  facts.selective_activation_bytes_per_rank = 6e8;
  // A layer's matmul and its attention, and the embedding outside the layers.
  TracedOp layer_mm = matmul(1'000'000'000'000ull, 0, "forward");
  layer_mm.in_layer = true;
  TracedOp attention = matmul(300'000'000'000ull, 0, "forward");
  attention.op = "aten::_scaled_dot_product_fused_attention_overrideable";
  attention.attention = true;
  attention.in_layer = true;
  const TracedOp embedding = matmul(100'000'000'000ull, 0, "forward");
  const std::vector<TracedOp> ops = {layer_mm, attention, embedding,
                                     matmul(2'000'000'000'000ull, 0, "backward")};
  const Projection a = project(ops, facts, plain, w, trn2, f.data, f.chips);
  const Projection b = project(ops, facts, ac, w, trn2, f.data, f.chips);
  const RankModel rank(trn2, f.data, f.chips);
  const double latency = f.data.trainium.op_latency_us * 1e3;
  const double mm_ns = 1e12 / (rank.peak_bf16_flops_per_ns() * f.data.trainium.tensor) + latency;
  const double attention_ns = 3e11 / (rank.peak_bf16_flops_per_ns() * f.data.trainium.tensor) + latency;
  // Full recompute reruns the layers' forward, not the embedding.
  EXPECT_NEAR(b.step_ns - a.step_ns, mm_ns + attention_ns, 1);
  EXPECT_DOUBLE_EQ(b.useful_flops_per_step, a.useful_flops_per_step);  // recomputation is not useful
  const double states = 1 * (2.0 * 2 + 12);
  EXPECT_DOUBLE_EQ(a.hbm_bytes_per_rank, states + 1e9);
  EXPECT_DOUBLE_EQ(b.hbm_bytes_per_rank, states + 2e6 + 1e8);
  // Selective recompute (Megatron-LM's) reruns only the attention core and drops its activations.
  Layout sel;
  sel.recompute = Recompute::kSelective;
  const Projection c = project(ops, facts, sel, w, trn2, f.data, f.chips);
  EXPECT_NEAR(c.step_ns - a.step_ns, attention_ns, 1);
  EXPECT_DOUBLE_EQ(c.hbm_bytes_per_rank, states + 6e8);
  for (const Projection* p : {&a, &b, &c}) EXPECT_NEAR(parts_sum(*p), p->step_ns, 1e-6);
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

TEST(Projection, ZeroOneShardsTheOptimizerStateAndGathersTheParameters) {
  // ZeRO-1 over dp = 4: the optimizer state and the optimizer's work are a quarter; gradients
  // are reduce-scattered (hidden behind the backward like an all-reduce) and the updated
  // parameters all-gathered after the step (exposed).
  const auto& f = files();
  const InstanceSpec& trn1 = f.data.instance("trn1.32xlarge");
  const RankModel rank(trn1, f.data, f.chips);
  ModelFacts facts;
  facts.layers = 1;
  facts.hidden = 64;
  facts.params_per_rank = 1e8;
  TracedOp adam;
  adam.op = "aten::_fused_adamw_";
  adam.phase = "optimizer";
  adam.work.precision = Precision::kFp32;
  adam.work[Engine::kVector].ops = 4'000'000'000ull;
  adam.work[Engine::kVector].bytes_written = 4'000'000'000ull;
  const std::vector<TracedOp> ops = {matmul(1'000'000'000'000ull, 0, "forward"),
                                     matmul(2'000'000'000'000ull, 0, "backward"), adam};
  Workload w;
  w.tokens_per_microbatch = 1024;
  Layout plain;
  plain.dp = 4;
  Layout zero1 = plain;
  zero1.zero1 = true;
  const Projection a = project(ops, facts, plain, w, trn1, f.data, f.chips);
  const Projection b = project(ops, facts, zero1, w, trn1, f.data, f.chips);
  EXPECT_DOUBLE_EQ(a.hbm_bytes_per_rank, 1e8 * (2 + 2 + 12));
  EXPECT_DOUBLE_EQ(b.hbm_bytes_per_rank, 1e8 * (2 + 2 + 12.0 / 4));
  const double gather = collective_ns(CollectiveKind::kAllGather, 1e8 * 2, 4, 1, trn1, f.data, rank);
  double opt = 0;
  for (const auto& ph : a.phases) {
    if (ph.phase == "optimizer") opt = ph.compute_ns + ph.fixed_ns;
  }
  EXPECT_NEAR(b.step_ns - a.step_ns, gather - opt * 3 / 4, 1);
  EXPECT_NEAR(parts_sum(b), b.step_ns, 1e-6);
}

TEST(Projection, PipelinePartsAddUpToTheStep) {
  // The chart draws the parts: with pipeline stages, micro-batches and TP collectives they must
  // add up to the reported step time, not count every stage boundary's sends on every rank.
  const auto& f = files();
  const InstanceSpec& trn1 = f.data.instance("trn1.32xlarge");
  ModelFacts facts;
  facts.layers = 8;
  facts.hidden = 4096;
  facts.params_per_rank = 1e8;
  Layout layout;
  layout.tp = 8;
  layout.pp = 4;
  layout.microbatches = 16;
  Workload w;
  w.tokens_per_microbatch = 4096;
  const std::vector<TracedOp> ops = {matmul(1'000'000'000'000ull, 0, "forward"),
                                     matmul(2'000'000'000'000ull, 0, "backward"),
                                     collective(4096.0 * 4096 * 2, 4, "forward")};
  const Projection p = project(ops, facts, layout, w, trn1, f.data, f.chips);
  EXPECT_NEAR(parts_sum(p), p.step_ns, 1e-3);
  double sends = 0;
  for (const auto& c : p.collectives) {
    if (c.name == "pp send") sends = c.count;
  }
  EXPECT_DOUBLE_EQ(sends, 2 * 16);  // a rank sends one activation and one gradient per micro-batch
}

TEST(Projection, ExpertAllToAllBlocksForwardAndBackward) {
  // Expert parallelism in training over ep = 4 of the dp replicas: the traced dispatch and
  // combine all-to-alls block in the forward and again (mirrored) in the backward.
  const auto& f = files();
  const InstanceSpec& p5 = f.data.instance("p5.48xlarge");
  const RankModel rank(p5, f.data, f.chips);
  ModelFacts facts;
  facts.layers = 1;
  facts.hidden = 64;
  facts.params_per_rank = 1;
  Layout layout;
  layout.dp = 4;
  layout.ep = 4;
  Workload w;
  w.tokens_per_microbatch = 1024;
  const double bytes = 8e6;
  const std::vector<TracedOp> ops = {
      matmul(1000, 0, "forward"), matmul(1000, 0, "backward"),
      collective(bytes, 2, "forward", "ep", CollectiveKind::kAllToAll)};
  const Projection p = project(ops, facts, layout, w, p5, f.data, f.chips);
  Layout none = layout;
  none.ep = 1;
  const Projection q = project({matmul(1000, 0, "forward"), matmul(1000, 0, "backward")}, facts,
                               none, w, p5, f.data, f.chips);
  // ep = 4 over dp: members 1 rank apart (tp = cp = pp = 1).
  const double a2a = collective_ns(CollectiveKind::kAllToAll, bytes, 4, 1, p5, f.data, rank);
  EXPECT_NEAR(p.step_ns - q.step_ns, 4 * a2a, 1);
  EXPECT_EQ(p.collectives.at(0).name, "ep all-to-all");
}

TEST(LayerSplit, TheSecondTraceAddsOnePeriod) {
  auto op = [](const std::string& name, uint64_t ops, const std::string& phase = "forward") {
    TracedOp o;
    o.op = name;
    o.phase = phase;
    o.work.precision = Precision::kBf16;
    o.work[Engine::kVector].ops = ops;
    o.work[Engine::kVector].bytes_written = ops;
    return o;
  };
  // One layer = a norm and a matmul-like op; outside: the embedding and the head; the fused
  // optimizer step grows with the parameters (10 with one layer, 15 with two).
  const std::vector<TracedOp> one = {op("embed", 7), op("norm", 3), op("proj", 5), op("head", 11),
                                     op("adam", 10, "optimizer")};
  const std::vector<TracedOp> two = {op("embed", 7), op("norm", 3), op("proj", 5), op("norm", 3),
                                     op("proj", 5), op("head", 11), op("adam", 15, "optimizer")};
  const LayerSplit s = split_layers(one, two);
  auto total = [](const std::vector<TracedOp>& ops) {
    double sum = 0;
    for (const auto& o : ops) sum += o.count * o.work[Engine::kVector].ops;
    return sum;
  };
  EXPECT_DOUBLE_EQ(total(s.period), 3 + 5 + 5);      // norm + proj + adam's growth
  EXPECT_DOUBLE_EQ(total(s.outside), 7 + 11 + 5);    // embed + head + adam's base
  // A 10-layer model: outside once, the period ten times.
  const std::vector<TracedOp> model = combine({{&s.outside, 1, false}, {&s.period, 10, true}});
  EXPECT_DOUBLE_EQ(total(model), 7 + 11 + 5 + 10 * (3 + 5 + 5));
  for (const auto& o : model) EXPECT_EQ(o.in_layer, o.op == "norm" || o.op == "proj" || (o.op == "adam" && o.count == 10));
  // Layers that are not alike are refused (a period whose ops do not repeat).
  const std::vector<TracedOp> odd = {op("embed", 7), op("norm", 3), op("proj", 5), op("other", 9),
                                     op("head", 11), op("adam", 15, "optimizer")};
  EXPECT_THROW(split_layers(one, odd), Error);
}

}  // namespace
}  // namespace nrtsim::cost
