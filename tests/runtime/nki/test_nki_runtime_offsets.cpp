// Runtime offsets (Program.h's RuntimeOffset): an operand placed by an integer the kernel holds
// when the instruction runs. The interpreter places it each time (its value read then), refuses a
// value outside its range before anything moves (or moves nothing under oob_mode.skip), rejects
// at load time an operand whose last place leaves its buffer; the timeline orders it against
// every place it may take and charges the dynamic initiation interval.
#include <cstring>
#include <vector>

#include "test_util.h"

#include "runtime/nki/Interpreter.h"
#include "runtime/nki/Timeline.h"

namespace nrtsim::nki {
namespace {

View row_view(int32_t buffer, int64_t parts, int64_t width, int64_t row, int64_t offset = 0) {
  View v;
  v.buffer = buffer;
  v.offset = offset;
  v.ndim = 2;
  v.shape[0] = parts;
  v.shape[1] = width;
  v.stride[0] = row;
  v.stride[1] = 1;
  return v;
}

// out[2, 3] = x[:, at : at + 3] + 1, with `at` an int32 input read into a [1, 1] SBUF tile:
// buffers x (HBM, [2, 8]), at (HBM), out (HBM), x in SBUF, at in SBUF, the result in SBUF.
Program window_program(bool skip = false) {
  Program p;
  p.name = "window";
  auto buffer = [](Memory m, DType d, int64_t n, int32_t binding) {
    Buffer b;
    b.memory = m;
    b.dtype = d;
    b.elements = n;
    b.binding = binding;
    b.poison = binding == 2;
    return b;
  };
  p.buffers = {buffer(Memory::kHbm, DType::kFloat32, 16, 0), buffer(Memory::kHbm, DType::kInt32, 1, 1),
               buffer(Memory::kHbm, DType::kFloat32, 6, 2), buffer(Memory::kSbuf, DType::kFloat32, 16, -1),
               buffer(Memory::kSbuf, DType::kInt32, 1, -1), buffer(Memory::kSbuf, DType::kFloat32, 6, -1)};
  auto copy = [](Opcode op, Engine e, View dst, View a) {
    Instruction in;
    in.op = op;
    in.engine = e;
    in.dst = dst;
    in.a = a;
    return in;
  };
  p.instructions.push_back(copy(Opcode::kDmaCopy, Engine::kDma, row_view(3, 2, 8, 8), row_view(0, 2, 8, 8)));
  p.instructions.push_back(copy(Opcode::kDmaCopy, Engine::kDma, row_view(4, 1, 1, 1), row_view(1, 1, 1, 1)));
  Instruction add = copy(Opcode::kTensorScalar, Engine::kVector, row_view(5, 2, 3, 3), row_view(3, 2, 3, 8));
  add.alu0 = Alu::kAdd;
  add.imm0 = 1;
  RuntimeOffset r;
  r.operand = 1;  // a
  r.index = row_view(4, 1, 1, 1);
  r.stride = 1;
  r.count = 6;  // at in [0, 5]: columns at .. at + 2 of 8
  r.skip = skip;
  add.offsets.push_back(r);
  p.instructions.push_back(add);
  p.instructions.push_back(copy(Opcode::kDmaCopy, Engine::kDma, row_view(2, 2, 3, 3), row_view(5, 2, 3, 3)));
  return p;
}

std::vector<float> run_window(const Executable& exe, int32_t at) {
  std::vector<float> x(16), out(6, -7.0f);
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i);
  exe.run({{reinterpret_cast<uint8_t*>(x.data()), 64}, {reinterpret_cast<uint8_t*>(&at), 4},
           {reinterpret_cast<uint8_t*>(out.data()), 24}});
  return out;
}

TEST(NkiRuntimeOffsets, OperandPlacedByTheValueWhenItRuns) {
  const Executable exe(window_program());
  for (int32_t at : {0, 5, 2}) {  // one program, several values
    const std::vector<float> out = run_window(exe, at);
    for (int p = 0; p < 2; ++p) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(out[p * 3 + c], p * 8 + at + c + 1.0f) << at;
    }
  }
}

TEST(NkiRuntimeOffsets, OutOfRangeIsAnErrorNamingTheLine) {
  const Executable exe(window_program());
  for (int32_t at : {6, -1}) {
    try {
      run_window(exe, at);
      ADD_FAILURE() << "no error for " << at;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("instruction 2 (tensor_scalar"), std::string::npos) << what;
      EXPECT_NE(what.find("index " + std::to_string(at) + " (the runtime offset of the first "
                          "operand) is outside [0, 6)"),
                std::string::npos)
          << what;
    }
  }
}

TEST(NkiRuntimeOffsets, SkipMovesNothing) {
  const Executable exe(window_program(/*skip=*/true));
  // The result tile is never written: the output carries its poison (NaN).
  for (float v : run_window(exe, 7)) EXPECT_TRUE(v != v);
}

TEST(NkiRuntimeOffsets, LastPlaceOutsideTheBufferIsRejected) {
  Program p = window_program();
  p.instructions[2].offsets[0].count = 7;  // at = 6 would read columns 6..8 of row 1: past x
  EXPECT_THROW({ Executable exe(p); }, Error);
  p = window_program();
  p.instructions[2].offsets[0].index = row_view(3, 1, 1, 1);  // a float index
  EXPECT_THROW({ Executable exe(p); }, Error);
}

TEST(NkiRuntimeOffsets, TimelineOrdersEveryPlaceAndChargesTheInterval) {
  std::string model = NRTSIM_SHIPPED_ENGINE_MODEL;  // the DMA model's file is beside it
  set_default_dma_model_path(model.substr(0, model.rfind("torch_neuronx/data/")) + "nki/data/dma.ini");
  const CoreSpec spec = load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL).at("Trainium2");
  Program p = window_program();
  // A GpSimd write to column 7 of x in SBUF: outside the operand's place at 0, inside its reach.
  Instruction write;
  write.op = Opcode::kMemset;
  write.engine = Engine::kGpSimd;
  write.dst = row_view(3, 2, 1, 8, 7);
  p.instructions.insert(p.instructions.begin() + 2, write);
  const Timeline t = schedule(p, spec);
  EXPECT_GE(t.instructions[3].start_ns, t.instructions[2].end_ns);
  EXPECT_DOUBLE_EQ(t.instructions[3].end_ns - t.instructions[3].start_ns,
                   kDynamicOffsetMinCycles / spec.vector_clock_ghz);
}

}  // namespace
}  // namespace nrtsim::nki
