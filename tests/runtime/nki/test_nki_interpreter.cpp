// The NKI interpreter and timeline on hand-built programs: storage rounding, poisoned fresh
// tiles, PSUM accumulation, bounds checks, and the per-engine timeline (costs from the shipped
// engine model, overlap across engines, serialisation by dependencies).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "test_util.h"

#include "runtime/nki/Interpreter.h"
#include "runtime/nki/Numerics.h"
#include "runtime/nki/DmaModel.h"
#include "runtime/nki/Timeline.h"

namespace nrtsim::nki {
namespace {

View view(int32_t buffer, std::vector<int64_t> shape, int64_t offset = 0) {
  View v;
  v.buffer = buffer;
  v.offset = offset;
  v.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.stride[i] = stride;
    stride *= shape[i];
  }
  return v;
}

Buffer buffer(Memory memory, DType dtype, int64_t elements, int32_t binding = -1,
              bool poisoned = true) {
  Buffer b;
  b.memory = memory;
  b.dtype = dtype;
  b.elements = elements;
  b.binding = binding;
  b.poison = poisoned;
  return b;
}

Instruction instruction(Opcode op, Engine engine, View dst, View a = {}, View b = {}) {
  Instruction in;
  in.op = op;
  in.engine = engine;
  in.dst = dst;
  in.a = a;
  in.b = b;
  return in;
}

TEST(NkiNumerics, RoundsToNearestEvenAsStored) {
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // a tie goes to the even neighbour
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(small_float_encode(DType::kFloat16, 65520.0f), 0x7c00u);  // overflow to inf
  EXPECT_EQ(small_float_decode(DType::kFloat16, 0x0001), std::ldexp(1.0f, -24));  // subnormal
  EXPECT_EQ(small_float_decode(DType::kFloat8E4M3Fn, small_float_encode(DType::kFloat8E4M3Fn, 1e6f)),
            448.0f);  // no infinity: saturates
  EXPECT_TRUE(std::isinf(small_float_decode(DType::kFloat8E5M2,
                                            small_float_encode(DType::kFloat8E5M2, 1e6f))));
  EXPECT_EQ(small_float_decode(DType::kFloat8E4M3, small_float_encode(DType::kFloat8E4M3, 17.0f)),
            16.0f);  // 3 mantissa bits: 17 is a tie between 16 and 18, even is 16
}

// out[2, 4] (HBM, fp32) = x[3, 2]^T @ y[3, 4] accumulated twice in PSUM, copied through SBUF.
Program matmul_program() {
  Program p;
  p.name = "mm";
  p.buffers = {buffer(Memory::kHbm, DType::kFloat32, 6, 0, false),
               buffer(Memory::kHbm, DType::kFloat32, 12, 1, false),
               buffer(Memory::kHbm, DType::kFloat32, 8, 2, true),
               buffer(Memory::kSbuf, DType::kBFloat16, 6), buffer(Memory::kSbuf, DType::kBFloat16, 12),
               buffer(Memory::kPsum, DType::kFloat32, 8), buffer(Memory::kSbuf, DType::kFloat32, 8)};
  p.instructions.push_back(instruction(Opcode::kDmaCopy, Engine::kDma, view(3, {3, 2}), view(0, {3, 2})));
  p.instructions.push_back(instruction(Opcode::kDmaCopy, Engine::kDma, view(4, {3, 4}), view(1, {3, 4})));
  Instruction mm = instruction(Opcode::kMatmul, Engine::kTensor, view(5, {2, 4}), view(3, {3, 2}),
                               view(4, {3, 4}));
  p.instructions.push_back(mm);
  mm.accumulate = true;
  p.instructions.push_back(mm);
  p.instructions.push_back(instruction(Opcode::kTensorCopy, Engine::kVector, view(6, {2, 4}), view(5, {2, 4})));
  p.instructions.push_back(instruction(Opcode::kDmaCopy, Engine::kDma, view(2, {2, 4}), view(6, {2, 4})));
  return p;
}

TEST(NkiInterpreter, MatmulAccumulatesInPsum) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6.00390625f};  // the last rounds to 6 in bf16
  std::vector<float> y(12);
  for (int i = 0; i < 12; ++i) y[i] = static_cast<float>(i);
  std::vector<float> out(8, 0);
  Executable exe(matmul_program());
  exe.run({{reinterpret_cast<uint8_t*>(x.data()), 24}, {reinterpret_cast<uint8_t*>(y.data()), 48},
           {reinterpret_cast<uint8_t*>(out.data()), 32}});
  const float xb[3][2] = {{1, 2}, {3, 4}, {5, 6}};
  for (int m = 0; m < 2; ++m) {
    for (int n = 0; n < 4; ++n) {
      float ref = 0;
      for (int k = 0; k < 3; ++k) ref += xb[k][m] * y[k * 4 + n];
      EXPECT_EQ(out[m * 4 + n], 2 * ref) << m << "," << n;
    }
  }
}

TEST(NkiInterpreter, FreshTilesArePoisoned) {
  Program p;
  p.name = "poison";
  p.buffers = {buffer(Memory::kHbm, DType::kFloat32, 4, 0, true), buffer(Memory::kSbuf, DType::kBFloat16, 4)};
  p.instructions.push_back(instruction(Opcode::kDmaCopy, Engine::kDma, view(0, {1, 4}), view(1, {1, 4})));
  std::vector<float> out(4, 1.0f);
  Executable(p).run({{reinterpret_cast<uint8_t*>(out.data()), 16}});
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

TEST(NkiInterpreter, ViewsOutsideTheirBufferAreRejected) {
  Program p = matmul_program();
  p.instructions[0].a = view(0, {3, 3});
  EXPECT_THROW({ Executable exe(p); }, Error);
}

// The DMA model's data file, beside the engine model's in the source tree.
std::string shipped_dma_model() {
  std::string p = NRTSIM_SHIPPED_ENGINE_MODEL;
  return p.substr(0, p.rfind("torch_neuronx/data/")) + "nki/data/dma.ini";
}

TEST(NkiDma, DescriptorsFollowContiguity) {
  set_default_dma_model_path(shipped_dma_model());
  const DmaSpec& dma = dma_spec("v3");
  Program p;
  p.buffers = {buffer(Memory::kHbm, DType::kBFloat16, 256 * 1024),
               buffer(Memory::kSbuf, DType::kBFloat16, 128 * 512)};
  // A [128, 512] row block of a [256, 1024] HBM matrix into SBUF: one descriptor per partition.
  View rows = view(0, {128, 512});
  rows.stride = {1024, 1};
  Instruction load = instruction(Opcode::kDmaCopy, Engine::kDma, view(1, {128, 512}), rows);
  DmaShape s = dma_shape(p, load, dma);
  EXPECT_EQ(s.descriptors, 128);
  EXPECT_DOUBLE_EQ(s.descriptor_bytes, 1024.0);
  // The transposed read (a column walk): element by element.
  View cols = view(0, {128, 512});
  cols.stride = {1, 1024};
  load.a = cols;
  s = dma_shape(p, load, dma);
  EXPECT_EQ(s.descriptors, 128 * 512);
  EXPECT_DOUBLE_EQ(s.descriptor_bytes, 2.0);
  // 16 engines, 8 descriptors of 2 B each: setup, then per descriptor its fixed cost and bytes.
  load.a = rows;
  const std::vector<double> shares = dma_engine_times(p, load, dma);
  ASSERT_EQ(shares.size(), 16u);
  EXPECT_DOUBLE_EQ(shares[0], dma.transfer_fixed_ns + 8 * (dma.descriptor_ns + 1024 / dma.engine_bytes_per_ns));
  // A large contiguous HBM -> HBM copy is split at max_descriptor_bytes over every engine.
  Program q;
  q.buffers = {buffer(Memory::kHbm, DType::kFloat32, 1 << 20), buffer(Memory::kHbm, DType::kFloat32, 1 << 20)};
  Instruction copy = instruction(Opcode::kDmaCopy, Engine::kDma, view(1, {1 << 20}), view(0, {1 << 20}));
  s = dma_shape(q, copy, dma);
  EXPECT_EQ(s.descriptors, (4 << 20) / 32768);
  EXPECT_DOUBLE_EQ(s.descriptor_bytes, 32768.0);
}

TEST(NkiTimeline, CostsOverlapAndDependencies) {
  set_default_dma_model_path(shipped_dma_model());
  const CoreSpec spec = load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL).at("Trainium2");
  const Program p = matmul_program();
  const Timeline t = schedule(p, spec);
  // Two 16-bit matmuls with N = 4: max(N, 64) cycles each.
  EXPECT_DOUBLE_EQ(t.busy_ns[index_of(Engine::kTensor)], 2 * 64 / spec.tensor_clock_ghz);
  // The matmul waits for both loads (plus their latency); the copy waits for both matmuls.
  EXPECT_GE(t.instructions[2].start_ns, t.instructions[1].end_ns);
  EXPECT_GE(t.instructions[4].start_ns, t.instructions[3].end_ns);
  EXPECT_DOUBLE_EQ(t.makespan_ns, t.instructions[5].end_ns);
  EXPECT_EQ(t.matmul_flops, 2u * 2 * 3 * 2 * 4);

  // Two independent instructions on different engines start together.
  Program q;
  q.name = "overlap";
  q.buffers = {buffer(Memory::kSbuf, DType::kFloat32, 512), buffer(Memory::kSbuf, DType::kFloat32, 512),
               buffer(Memory::kSbuf, DType::kFloat32, 512)};
  Instruction act = instruction(Opcode::kActivation, Engine::kScalar, view(1, {1, 512}), view(0, {1, 512}));
  Instruction vec = instruction(Opcode::kTensorCopy, Engine::kVector, view(2, {1, 512}), view(0, {1, 512}));
  q.instructions = {act, vec};
  const Timeline u = schedule(q, spec);
  EXPECT_DOUBLE_EQ(u.instructions[0].start_ns, u.instructions[1].start_ns);
  // ... and serialise when the second reads what the first writes.
  q.instructions[1].a = view(1, {1, 512});
  const Timeline w = schedule(q, spec);
  EXPECT_DOUBLE_EQ(w.instructions[1].start_ns, w.instructions[0].end_ns);
}

TEST(NkiTimeline, TiledMatmulsOnDisjointTilesOverlap) {
  // AWS's nc_matmul tiling mode: a matmul with a PE tile (pattern: start_row, row_size,
  // start_column, column_size) holds only its cells of the 128 x 128 array.
  set_default_dma_model_path(shipped_dma_model());
  const CoreSpec spec = load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL).at("Trainium2");
  Program p;
  p.name = "tiles";
  p.buffers = {buffer(Memory::kSbuf, DType::kBFloat16, 32 * 32), buffer(Memory::kSbuf, DType::kBFloat16, 32 * 512)};
  auto tiled = [&](int64_t row, int64_t col) {
    p.buffers.push_back(buffer(Memory::kPsum, DType::kFloat32, 32 * 512));
    Instruction mm = instruction(Opcode::kMatmul, Engine::kTensor,
                                 view(static_cast<int32_t>(p.buffers.size() - 1), {32, 512}),
                                 view(0, {32, 32}), view(1, {32, 512}));
    mm.pattern[0] = row;
    mm.pattern[1] = 32;
    mm.pattern[2] = col;
    mm.pattern[3] = 32;
    return mm;
  };
  const double one = 512 / spec.tensor_clock_ghz;  // max(N, 64) cycles, N = 512
  for (int i = 0; i < 4; ++i) p.instructions.push_back(tiled(32 * i, 32 * i));
  Timeline t = schedule(p, spec);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(t.instructions[i].start_ns, 0.0);
  EXPECT_NEAR(t.makespan_ns, one, 1e-9);
  EXPECT_NEAR(t.busy_ns[index_of(Engine::kTensor)], one, 1e-9);
  // The same tile twice: one after the other.
  p.instructions = {tiled(32, 32), tiled(32, 32)};
  t = schedule(p, spec);
  EXPECT_DOUBLE_EQ(t.instructions[1].start_ns, t.instructions[0].end_ns);
  EXPECT_NEAR(t.busy_ns[index_of(Engine::kTensor)], 2 * one, 1e-9);
  // Without a tile a matmul holds the whole array.
  Instruction whole = tiled(0, 0);
  whole.pattern = {};
  p.instructions = {tiled(0, 0), whole, tiled(96, 96)};
  t = schedule(p, spec);
  EXPECT_DOUBLE_EQ(t.instructions[1].start_ns, t.instructions[0].end_ns);
  EXPECT_DOUBLE_EQ(t.instructions[2].start_ns, t.instructions[1].end_ns);
}

TEST(NkiTimeline, CoreBarrierAlignsBothCores) {
  // Two programs (the logical cores of an LNC=2 launch): core 0 runs a long activation, core 1 a
  // short copy; after the barrier pair, core 1's next copy starts only when core 0's work is
  // done plus one semaphore write (the DMA latency), though it reads nothing core 0 wrote.
  set_default_dma_model_path(shipped_dma_model());
  const CoreSpec spec = load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL).at("Trainium2");
  Program p;
  p.name = "barrier";
  p.buffers = {buffer(Memory::kSbuf, DType::kFloat32, 128 * 4096), buffer(Memory::kSbuf, DType::kFloat32, 128 * 4096),
               buffer(Memory::kSbuf, DType::kFloat32, 512), buffer(Memory::kSbuf, DType::kFloat32, 512)};
  Instruction slow = instruction(Opcode::kActivation, Engine::kScalar, view(1, {128, 4096}), view(0, {128, 4096}));
  Instruction fast = instruction(Opcode::kTensorCopy, Engine::kVector, view(3, {1, 512}), view(2, {1, 512}));
  fast.program = 1;
  Instruction bar0 = instruction(Opcode::kBarrier, Engine::kGpSimd, {});
  Instruction bar1 = bar0;
  bar1.program = 1;
  Instruction after = fast;
  p.instructions = {slow, fast, bar0, bar1, after};
  const Timeline t = schedule(p, spec);
  const double done = std::max(t.instructions[0].end_ns, t.instructions[1].end_ns);
  EXPECT_GT(t.instructions[0].end_ns, t.instructions[1].end_ns);
  const double release = done + dma_spec(spec.neuroncore).latency_ns;
  EXPECT_DOUBLE_EQ(t.instructions[2].end_ns, release);
  EXPECT_DOUBLE_EQ(t.instructions[3].end_ns, release);
  EXPECT_DOUBLE_EQ(t.instructions[4].start_ns, release);
  EXPECT_GE(t.makespan_ns, release);
  // Two barriers in a row: the second waits for the first's release and one more write.
  p.instructions = {slow, fast, bar0, bar1, bar0, bar1, after};
  const Timeline twice = schedule(p, spec);
  EXPECT_DOUBLE_EQ(twice.instructions[3].end_ns, release);
  EXPECT_DOUBLE_EQ(twice.instructions[5].end_ns, release + dma_spec(spec.neuroncore).latency_ns);
  EXPECT_DOUBLE_EQ(twice.instructions[6].start_ns, twice.instructions[5].end_ns);
  // Without the barriers the copy would start right after core 1's first one.
  p.instructions = {slow, fast, after};
  EXPECT_LT(schedule(p, spec).instructions[2].start_ns, done);
}

TEST(NkiTimeline, CoreBarrierHoldsItsEngineAndItsDataOnly) {
  // nisa.core_barrier (axes bit 0, its data view a): AWS, "The barrier will block execution on
  // this engine, other engines will not be blocked". Core 0's long activation writes the data;
  // core 1 waits on the Vector engine. After the release: core 1's Vector copy waits for it, its
  // GpSimd copy of other tiles does not, and a read of the data on GpSimd does.
  set_default_dma_model_path(shipped_dma_model());
  const CoreSpec spec = load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL).at("Trainium2");
  Program p;
  p.name = "engine barrier";
  p.buffers = {buffer(Memory::kSbuf, DType::kFloat32, 128 * 4096), buffer(Memory::kSbuf, DType::kFloat32, 128 * 4096),
               buffer(Memory::kSbuf, DType::kFloat32, 512), buffer(Memory::kSbuf, DType::kFloat32, 512),
               buffer(Memory::kSbuf, DType::kFloat32, 512)};
  Instruction slow = instruction(Opcode::kActivation, Engine::kScalar, view(1, {128, 4096}), view(0, {128, 4096}));
  Instruction fast = instruction(Opcode::kTensorCopy, Engine::kVector, view(3, {1, 512}), view(2, {1, 512}));
  fast.program = 1;
  Instruction bar0 = instruction(Opcode::kBarrier, Engine::kVector, {}, view(1, {128, 4096}));
  bar0.axes = 1;
  Instruction bar1 = bar0;
  bar1.program = 1;
  Instruction same_engine = fast;
  Instruction other_engine = instruction(Opcode::kTensorCopy, Engine::kGpSimd, view(4, {1, 512}), view(2, {1, 512}));
  other_engine.program = 1;
  Instruction reads_data = instruction(Opcode::kTensorCopy, Engine::kGpSimd, view(4, {1, 512}), view(1, {1, 512}));
  reads_data.program = 1;
  p.instructions = {slow, fast, bar0, bar1, same_engine, other_engine, reads_data};
  const Timeline t = schedule(p, spec);
  const double release = t.instructions[0].end_ns + dma_spec(spec.neuroncore).latency_ns;
  EXPECT_DOUBLE_EQ(t.instructions[2].end_ns, release);
  EXPECT_DOUBLE_EQ(t.instructions[3].end_ns, release);
  EXPECT_DOUBLE_EQ(t.instructions[4].start_ns, release);
  EXPECT_LT(t.instructions[5].start_ns, release);
  EXPECT_GE(t.instructions[6].start_ns, release);
  // Without the barriers the GpSimd copy starts at the same time.
  p.instructions = {slow, fast, other_engine};
  EXPECT_DOUBLE_EQ(schedule(p, spec).instructions[2].start_ns, t.instructions[5].start_ns);
}

TEST(NkiTimeline, EngineSpansAreFirstStartToLastEnd) {
  // The per-engine spans the profiler draws: each used engine's first instruction start and last
  // instruction end (for DMA, when its data is ready), over the instructions' own times.
  set_default_dma_model_path(shipped_dma_model());
  const CoreSpec spec = load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL).at("Trainium2");
  const Program p = matmul_program();
  const Timeline t = schedule(p, spec);
  for (Engine e : kAllEngines) {
    double first = 0, last = 0;
    bool used = false;
    for (size_t i = 0; i < p.instructions.size(); ++i) {
      if (p.instructions[i].engine != e) continue;
      first = used ? std::min(first, t.instructions[i].start_ns) : t.instructions[i].start_ns;
      last = used ? std::max(last, t.instructions[i].end_ns) : t.instructions[i].end_ns;
      used = true;
    }
    EXPECT_EQ(used, t.instruction_count[index_of(e)] > 0);
    EXPECT_DOUBLE_EQ(t.engine_begin_ns[index_of(e)], first);
    EXPECT_DOUBLE_EQ(t.engine_end_ns[index_of(e)], last);
  }
  // The loads start the kernel, the store ends it; the matmuls lie between.
  EXPECT_DOUBLE_EQ(t.engine_begin_ns[index_of(Engine::kDma)], 0.0);
  EXPECT_DOUBLE_EQ(t.engine_end_ns[index_of(Engine::kDma)], t.makespan_ns);
  EXPECT_GT(t.engine_begin_ns[index_of(Engine::kTensor)], 0.0);
  EXPECT_LT(t.engine_end_ns[index_of(Engine::kTensor)], t.makespan_ns);
  EXPECT_EQ(t.engine_end_ns[index_of(Engine::kGpSimd)], 0.0);
}

}  // namespace
}  // namespace nrtsim::nki
