// The collective instruction of nki.collectives (runtime/nki/Collective.h) on hand-built
// programs: the interpreter stages the source view's bytes in view order, hands them to the hook,
// writes what the hook returns into the destination view; a permute-reduce's op in FP32 rounded
// to the destination's format; no hook is an error; the timeline prices a call (a coalesced one
// once) with the link model's rule and keeps every DMA queue busy for it.
#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

#include "runtime/LinkModel.h"
#include "runtime/nki/Collective.h"
#include "runtime/nki/DmaModel.h"
#include "runtime/nki/Interpreter.h"
#include "runtime/nki/Numerics.h"
#include "runtime/nki/Timeline.h"
#include "runtime/transport/Verb.h"

namespace nrtsim::nki {
namespace {

View view(int32_t buffer, std::vector<int64_t> shape, std::vector<int64_t> stride,
          int64_t offset = 0) {
  View v;
  v.buffer = buffer;
  v.offset = offset;
  v.ndim = static_cast<int32_t>(shape.size());
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = shape[i];
    v.stride[i] = stride[i];
  }
  return v;
}

Buffer hbm(DType dtype, int64_t elements, int32_t binding) {
  Buffer b;
  b.memory = Memory::kHbm;
  b.dtype = dtype;
  b.elements = elements;
  b.binding = binding;
  b.poison = false;
  return b;
}

Instruction collective(CollectiveKind kind, View dst, View a, int ranks, int call) {
  Instruction in;
  in.op = Opcode::kCollective;
  in.engine = Engine::kDma;
  in.axes = static_cast<uint32_t>(kind);
  in.dst = dst;
  in.a = a;
  in.imm0 = ranks;
  in.imm1 = call;
  in.text = "{}";
  return in;
}

TEST(NkiCollective, StagesTheSourceViewAndWritesTheDestinationView) {
  Program p;
  p.name = "cc";
  p.buffers = {hbm(DType::kFloat32, 12, 0), hbm(DType::kFloat32, 12, 1)};
  // The source: column 1 of a [3, 4] tensor (a strided view); the destination: row 2.
  p.instructions.push_back(collective(CollectiveKind::kAllReduce, view(1, {1, 3}, {4, 1}, 8),
                                      view(0, {3, 1}, {4, 1}, 1), 2, 0));
  const Executable exe(p);
  std::vector<float> in(12), out(12, -1.0f);
  for (int i = 0; i < 12; ++i) in[static_cast<size_t>(i)] = static_cast<float>(i);
  std::vector<float> seen;
  const CollectiveHook hook = [&](CollectiveExchange& x) {
    EXPECT_EQ(x.kind, CollectiveKind::kAllReduce);
    EXPECT_EQ(x.send.shape, (std::vector<int64_t>{3, 1}));
    seen.resize(x.send.bytes.size() / 4);
    std::memcpy(seen.data(), x.send.bytes.data(), x.send.bytes.size());
    // What "arrives": the values doubled.
    std::vector<float> back(seen.size());
    for (size_t i = 0; i < back.size(); ++i) back[i] = 2 * seen[i];
    ASSERT_EQ(x.receive.bytes.size(), back.size() * 4);
    std::memcpy(x.receive.bytes.data(), back.data(), x.receive.bytes.size());
  };
  exe.run({{reinterpret_cast<uint8_t*>(in.data()), 48},
           {reinterpret_cast<uint8_t*>(out.data()), 48}},
          &hook);
  EXPECT_EQ(seen, (std::vector<float>{1, 5, 9}));
  const std::vector<float> want = {-1, -1, -1, -1, -1, -1, -1, -1, 2, 10, 18, -1};
  EXPECT_EQ(out, want);
}

TEST(NkiCollective, WithoutAnExchangeTheRunFailsSayingWhatToProvide) {
  Program p;
  p.name = "cc";
  p.buffers = {hbm(DType::kFloat32, 4, 0), hbm(DType::kFloat32, 4, 1)};
  p.instructions.push_back(collective(CollectiveKind::kAllGather, view(1, {4}, {1}),
                                      view(0, {4}, {1}), 1, 0));
  const Executable exe(p);
  std::vector<float> a(4), b(4);
  try {
    exe.run({{reinterpret_cast<uint8_t*>(a.data()), 16},
             {reinterpret_cast<uint8_t*>(b.data()), 16}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no exchange with other ranks"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("all_gather"), std::string::npos);
  }
}

TEST(NkiCollective, APermuteReduceSendsTheFp32ResultRoundedToTheDestination) {
  Program p;
  p.name = "cc";
  p.buffers = {hbm(DType::kFloat32, 2, 0), hbm(DType::kFloat32, 2, 1), hbm(DType::kBFloat16, 2, 2)};
  Instruction in = collective(CollectiveKind::kPermuteImplicitReduce, view(2, {2}, {1}),
                              view(0, {2}, {1}), 2, 0);
  in.c = view(1, {2}, {1});
  in.alu0 = Alu::kAdd;
  p.instructions.push_back(in);
  const Executable exe(p);
  std::vector<float> a = {1.0f, 3.0f}, c = {1.0f / 256, 1.0f / 128};
  std::vector<uint16_t> dst(2, 0);
  std::vector<uint16_t> sent;
  const CollectiveHook hook = [&](CollectiveExchange& x) {
    EXPECT_EQ(x.send.dtype, DType::kBFloat16);
    sent.resize(2);
    std::memcpy(sent.data(), x.send.bytes.data(), 4);
    x.receive.bytes = x.send.bytes;  // a ring of one
  };
  exe.run({{reinterpret_cast<uint8_t*>(a.data()), 8}, {reinterpret_cast<uint8_t*>(c.data()), 8},
           {reinterpret_cast<uint8_t*>(dst.data()), 4}},
          &hook);
  EXPECT_EQ(sent, (std::vector<uint16_t>{float_to_bf16(1.0f + 1.0f / 256),
                                         float_to_bf16(3.0f + 1.0f / 128)}));
  EXPECT_EQ(dst, sent);
}

// nki/data/dma.ini beside the shipped engine model's package.
std::string shipped_dma_model() {
  const std::string p = NRTSIM_SHIPPED_ENGINE_MODEL;
  return p.substr(0, p.rfind("torch_neuronx/data/")) + "nki/data/dma.ini";
}

TEST(NkiCollective, TheTimelinePricesACallOnTheLinkModelOnceForItsParts) {
  set_default_dma_model_path(shipped_dma_model());
  const CoreSpec spec = load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL).at("Trainium2");
  const LinkModel model = load_link_model(NRTSIM_SHIPPED_LINK_MODEL);
  const CoreLinks links(model, "Trainium2", 4, 725);
  Program p;
  p.name = "cc";
  p.buffers = {hbm(DType::kFloat32, 1 << 16, 0), hbm(DType::kFloat32, 1 << 16, 1),
               hbm(DType::kFloat32, 1 << 16, 2), hbm(DType::kFloat32, 1 << 16, 3)};
  // One coalesced all-reduce of two 256 KiB tensors among 4 ranks.
  p.instructions.push_back(collective(CollectiveKind::kAllReduce, view(1, {1 << 16}, {1}),
                                      view(0, {1 << 16}, {1}), 4, 0));
  p.instructions.push_back(collective(CollectiveKind::kAllReduce, view(3, {1 << 16}, {1}),
                                      view(2, {1 << 16}, {1}), 4, 0));
  transport::GroupPlace place;
  place.size = 4;
  transport::VerbCall call;
  call.verb = transport::Verb::kAllreduce;
  call.bytes = 2u << 18;  // the call's two buffers as one
  const double want =
      links.collective_ns(transport::collective_traffic(transport::link_bytes(call, place)));
  ASSERT_GT(want, 0);
  const Timeline t = schedule(p, spec, &links);
  EXPECT_DOUBLE_EQ(t.instructions[0].end_ns - t.instructions[0].start_ns, want);
  EXPECT_DOUBLE_EQ(t.instructions[1].end_ns, t.instructions[0].end_ns);  // ends with its call
  EXPECT_DOUBLE_EQ(t.makespan_ns, want);
  EXPECT_DOUBLE_EQ(t.busy_ns[index_of(Engine::kDma)], want);
  // Two of the four ranks on this host, two on another: the call crosses EFA too.
  p.instructions[0].imm2 = p.instructions[1].imm2 = 2;
  place.host_of = {0, 0, 1, 1};
  const double across =
      links.collective_ns(transport::collective_traffic(transport::link_bytes(call, place)));
  EXPECT_GT(across, want);
  EXPECT_DOUBLE_EQ(schedule(p, spec, &links).makespan_ns, across);
  // Without the link model a collective of several ranks cannot be timed: an error, not 0.
  EXPECT_THROW(schedule(p, spec), Error);
  // A group of one rank moves nothing over the links.
  p.instructions[0].imm0 = p.instructions[1].imm0 = 1;
  EXPECT_DOUBLE_EQ(schedule(p, spec).makespan_ns, 0);
}

}  // namespace
}  // namespace nrtsim::nki
