// An NKI kernel after specialisation: the buffers it touches and a flat list of ISA instructions
// over views of them, in program order. The Python front end (the `nki` package) traces a kernel
// once per (shapes, dtypes, constants) into this form; the interpreter (Interpreter.h) executes
// it and the timeline (Timeline.h) times it per engine. Torch-free: the runtime layer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/Engine.h"

namespace nrtsim::nki {

// Storage formats of on-chip and HBM tensors. Vector, Scalar and GpSimd compute in FP32 and round
// on write, so every value passes through float between load and store.
enum class DType : uint8_t {
  kFloat32,
  kBFloat16,
  kFloat16,
  kFloat8E4M3,    // IEEE-style e4m3 with infinities (max 240), NKI's float8_e4m3
  kFloat8E4M3Fn,  // e4m3 without infinities (max 448), torch.float8_e4m3fn
  kFloat8E5M2,
  kInt32,
  kUInt32,
  kInt16,
  kUInt16,
  kInt8,
  kUInt8,
};
size_t dtype_size(DType dtype);
bool dtype_is_float(DType dtype);
const char* dtype_name(DType dtype);

enum class Memory : uint8_t { kHbm, kSbuf, kPsum };
const char* memory_name(Memory memory);

struct Buffer {
  Memory memory = Memory::kSbuf;
  DType dtype = DType::kFloat32;
  int64_t elements = 0;
  // Index into the external buffers given to Interpreter::run (kernel inputs and outputs), or -1
  // for storage the kernel allocates itself (on-chip tiles, HBM scratch).
  int32_t binding = -1;
  // External outputs start poisoned like every fresh allocation; inputs keep their data.
  bool poison = true;
};

inline constexpr int kMaxDims = 5;

// A strided view of a buffer, in elements of the buffer's dtype. Dim 0 of an on-chip view is the
// partition dim. A stride of 0 broadcasts.
struct View {
  int32_t buffer = -1;
  int32_t ndim = 0;
  int64_t offset = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};

  bool valid() const { return buffer >= 0; }
  int64_t numel() const;
  // Elements per partition (the product of dims 1..).
  int64_t free_size() const;
  // The lowest and one past the highest element the view touches.
  int64_t lowest() const;
  int64_t end() const;
};

enum class Opcode : uint8_t {
  kDmaCopy,       // dst <- a, any memory to any memory except PSUM, with dtype conversion
  kTensorCopy,    // dst <- a, on an engine
  kTensorTensor,  // dst <- a (alu0) b
  kTensorScalar,  // dst <- (a (alu0) operand0) (alu1) operand1; operands: imm or [P,1] views b / c
  kActivation,    // dst <- act(a * scale + bias); scale: imm0 or [P,1] view c; bias: [P,1] view b;
                  // reduce_res view d <- reduce over free dims (alu0) of the result
  kTensorReduce,  // dst <- reduce (alu0) of a over the dims in axes (free dims only)
  kMatmul,        // dst[M,N] (+)= a[K,M]^T @ b[K,N]; PSUM accumulates in FP32
  kTranspose,     // dst[F,P] <- a[P,F]
  kIota,          // dst[p, i...] <- imm0 + p * imm1 + sum(pattern[k] * i_k)
  kMemset,        // dst <- imm0
  kSelect,        // dst <- a != 0 ? b : c
  kPrint,         // device_print: the values of a, labelled with text
};
const char* opcode_name(Opcode op);

// ALU operations (Vector / GpSimd). Arithmetic runs in FP32; comparisons give 1.0 or 0.0.
enum class Alu : uint8_t {
  kBypass, kAdd, kSubtract, kMultiply, kDivide, kMax, kMin, kPow, kMod,
  kEqual, kNotEqual, kGreater, kGreaterEqual, kLess, kLessEqual,
  kLogicalAnd, kLogicalOr, kLogicalXor, kBitwiseAnd, kBitwiseOr, kBitwiseXor,
  kAbsMax, kAbsMin,
};

// Activation functions of the Scalar engine, computed in FP32.
enum class Act : uint8_t {
  kCopy, kExp, kLog, kSqrt, kRsqrt, kReciprocal, kTanh, kSigmoid, kRelu, kGelu, kGeluTanh,
  kSilu, kSoftplus, kErf, kSin, kCos, kAbs, kSquare, kSign, kNegate, kMish, kArctan,
};

struct Instruction {
  Opcode op = Opcode::kTensorCopy;
  Engine engine = Engine::kVector;
  int32_t program = 0;  // SPMD program (kernel[grid]): each runs on its own engines
  int32_t line = 0;     // kernel source line, for messages
  View dst, a, b, c, d;
  Alu alu0 = Alu::kBypass, alu1 = Alu::kBypass;
  bool reverse0 = false, reverse1 = false;
  double imm0 = 0, imm1 = 0;
  Act act = Act::kCopy;
  uint32_t axes = 0;  // tensor_reduce: bit k reduces dim k of a
  bool negate = false;
  bool accumulate = false;
  std::array<int64_t, kMaxDims> pattern{};  // iota steps per free dim of dst (dims 1..)
  std::string text;                          // device_print label
};

struct Program {
  std::string name;
  std::vector<Buffer> buffers;
  std::vector<Instruction> instructions;
};

}  // namespace nrtsim::nki
