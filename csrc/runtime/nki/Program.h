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
  // The MX formats of NeuronCore-v4 (OCP Microscaling): a power-of-two scale byte 2^(b-127), and
  // elements that pack four FP8 values in 32 bits / four FP4 (e2m1) values in 16 bits, the first
  // value in the lowest bits. Only MX instructions and same-dtype copies read or write the packs.
  kFloat8E8M0,
  kFloat8E5M2x4,
  kFloat8E4M3Fnx4,
  kFloat4E2M1Fnx4,
};
size_t dtype_size(DType dtype);
bool dtype_is_packed(DType dtype);
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

// A view's dims: the partition dim and up to 7 more. NKI sets no documented limit on a tensor's
// rank (AWS's own library kernels take 6-dim views of HBM tensors); what the hardware's access
// patterns cannot take in one descriptor the compiler splits. nki/_core.py's MAX_VIEW_DIMS is
// this number: past it, tracing stops with an NkiError at the kernel's line.
inline constexpr int kMaxDims = 8;

// A strided view of a buffer, in elements of the buffer's dtype. Dim 0 of an on-chip view is the
// partition dim. A stride of 0 broadcasts.
struct View {
  int32_t buffer = -1;
  int32_t ndim = 0;
  // The dtype the view reads its buffer's bytes as (NkiTensor.view / .ap(dtype=)); -1: the
  // buffer's own. Offset and strides count elements of this dtype.
  int32_t dtype = -1;
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
  kTensorScalar,  // dst <- (a (alu0) operand0) (alu1) operand1; operands: imm or views b / c; with
                  // alu2, the result's free-dim reduction into the accumulators e (reduce_cmd,
                  // load_reduce from f or imm2) and out to d (negated with `negate`)
  kActivation,    // dst <- act(a * scale + bias); scale: imm0 or [P,1] view c; bias: [P,1] view b
                  // or imm1, subtracted with reverse0 (exponential); reduction as kTensorScalar
  kTensorReduce,  // dst <- reduce (alu0) of a over the dims in axes (free dims only)
  kMatmul,        // dst[M,N] (+)= a[K,M]^T @ b[K,N]; PSUM accumulates in FP32. axes bit 0: FP8
                  // double-row mode, a[K,2,M] and b[K,2,N] contracting over K x 2 at one row's cost
  kTranspose,     // dst[F,P] <- a[P,F]
  kIota,          // dst[p, i...] <- imm0 + p * imm1 + sum(pattern[k] * i_k)
  kMemset,        // dst <- imm0
  kSelect,        // dst <- a != 0 ? b : c
  kPrint,         // device_print: the values of a, labelled with text
  kScan,          // per partition, along the free dims: s <- (a[i] (alu0) s) (alu1) b[i]; dst[i] <- s;
                  // s starts at c[p] or imm2; reverse0 / reverse1 swap the operations' sides
  kPartitionReduce,  // dst[0, f] <- reduce (alu0) over the partitions of a[:, f]; axes 1: average
  kAffineSelect,  // dst <- cmp (alu0)(imm0 + p * imm1 + sum(pattern[k] * i_k), 0) ? a : imm2
  kBnStats,       // dst[p, 0:6] <- count, mean, variance*count of the even and the odd elements of a
  kBnAggr,        // dst[p, 0:2] <- mean, variance from the (count, mean, variance*count) triples of a
  kMax8,          // dst[p, 0:8] <- the 8 largest values of a[p], descending
  kFindIndex8,    // dst[p, j] <- index of the first a[p, i] == b[p, j]; all ones if none
  kMatchReplace8, // dst <- a with the first match of each b[p, j] replaced by imm0; d <- indices
  kQuantizeMx,    // dst (x4) <- a / scale, d <- scale bytes, per group of 8 partitions x 4 values
  kMatmulMx,      // dst[M,N] (+)= sum over k, q of a[k,m,q] * 2^sa * b[k,n,q] * 2^sb; scales c, d
  // Selection, gather and cumulative instructions (run_selection in Interpreter.cpp). Operands
  // given per partition are [P,1] views; their immediate forms are imm0 / imm1 / imm2.
  kCumulative,    // per partition: r <- (a[i] (alu0) b|imm0) (alu1) r; dst[i] <- r; r starts per
                  // reduce_cmd (identity of alu1, the accumulators e, or c|imm1) and ends in e
  kSelectReduce,  // dst <- (a != 0) != reverse0 ? b : c|imm0; reduction as kTensorScalar
  kRangeSelect,   // dst <- (imm0 + i) (alu0) b[p] && (imm0 + i) (alu1) c[p] ? a : imm1, i the
                  // flat free index; reduction as kTensorScalar
  kNonzeroWithCount,  // partitions 0, 16, ...: dst <- indices of a's nonzeros + imm0, imm1
                      // padding, then the count
  kSequenceBounds,    // dst[0, 0:2, n] <- start and end of the segment of each a[0, i]
  kStreamShuffle,     // dst[q*32 + i] <- a[q*32 + mask[i]] (mask: 32 bytes, 8 to each of
                      // pattern[0..3], lowest byte first; 255 leaves the partition unmodified)
  kLocalGather,   // per group of 16 partitions: the group's indices b (partition-first), each
                  // reading imm0 contiguous elements of a's partition row; imm1 indices used
  kNGather,       // dst[p, j] <- a[p, flat b[p, j]]
  kDmaCompute,    // dst <- sum of the valid views a..f, in FP32, on the DMA engines
  kActivate2,     // dst <- act((a (alu0) b|imm0) (alu1) c|imm1; slope f|imm2); reduction as
                  // kActivation (reduce_cmd, e, d)
  kTopk,          // per group of 16 partitions: the top K (dst's free size) of the group's snake
                  // of imm0 values in a, ascending, in the same snake layout; their indices to d
  kDmaIndirect,   // a DMA whose rows are picked at run time by the integer values of b ([P,1] in
                  // SBUF, one per partition): gather (axes 0) dst[p, ...] <- a[b[p], ...], or
                  // scatter (axes 1) dst[b[p], ...] <- a[p, ...]. The indexed view spans the
                  // whole indexed dim (dim 0, every row an index may name); an index outside
                  // [0, its size) is an error, as the DMA engines' bounds check raises it.
                  // One index for a tile of several partitions (a scalar offset) moves the
                  // whole tile: gather dst <- a[b[0], ...], scatter dst[b[0], ...] <- a. axes bit 1:
                  // oob_mode.skip, an index outside [0, imm0) moving nothing. axes bit 2 (a
                  // gather): an indirect dma_transpose, dst a permuted view of the SBUF tile the
                  // gathered rows land in transposed (timed as a DMA transpose, DmaModel.cpp).
                  // axes bit 3: dma_compute's read-modify-write, each moved row added (FP32)
                  // to its destination's values; a scatter's indices must be distinct
  kBarrier,       // core_barrier (and sendrecv's synchronisation): no data moves; every logical
                  // core of the launch waits until all of them reach it (Timeline.cpp). axes
                  // bit 0 (core_barrier): only the instruction's engine and the accesses to
                  // view a (its data) wait; without it, every engine of every core waits
  // Device-side loops (DeviceLoops.h): the instructions between a kLoopBegin and its kLoopEnd
  // are one body, traced once and run as many times as register values say when the kernel
  // runs. Registers are [1, 1] int32 views of the kernel's own register buffers.
  kLoopBegin,     // axes 0, a counted loop: the induction value runs from a (or imm0) while it is
                  // below b (or imm1), step imm2 > 0, both bounds read once on entry; each
                  // iteration writes its value to dst (when valid). axes 1, a while loop: runs
                  // while register a is non-zero, read before every iteration. axes bit 1: the
                  // joint loop of an LNC=2 launch's two cores (their loops hold cross-core
                  // synchronisations): the second core's lower, upper and induction registers
                  // are c, d and e (its condition c); both cores must continue or stop together
  kLoopEnd,       // the end of the innermost open loop's body: back to its test
  kCollective,    // nki.collectives: an exchange with the other ranks of the job (Collective.h)
  // Tensor indirection (NkiTensor.indirect, NeuronCore-v4): the columns of an on-chip tensor at
  // free-dim offsets read when the instruction runs, staged for the compute instruction next to
  // it (untimed: the engine reads those columns in its own pass). a / dst: the data tensor's
  // [P, F] view; b: the [P, K] uint16 index; imm0: the partition group G (16, 32 for the Tensor
  // engine). Partition p of group g = p / G takes offset i from b[g * G + i % G, i / G]. axes 0,
  // a gather: dst[p, i] <- a[p, offset]; axes 1, a scatter: dst[p, offset] <- a[p, i], in
  // partition then element order (a repeated offset keeps the last element written).
  kTensorIndirect,
};
const char* opcode_name(Opcode op);

// ALU operations (Vector / GpSimd). Arithmetic runs in FP32; comparisons give 1.0 or 0.0.
enum class Alu : uint8_t {
  kBypass, kAdd, kSubtract, kMultiply, kDivide, kMax, kMin, kPow, kMod,
  kEqual, kNotEqual, kGreater, kGreaterEqual, kLess, kLessEqual,
  kLogicalAnd, kLogicalOr, kLogicalXor, kBitwiseAnd, kBitwiseOr, kBitwiseXor,
  kAbsMax, kAbsMin,
  kShiftLeft, kShiftRight,  // on the integer value (logical right shift: no sign extension)
  kFloorMod,                // x - floor(x / y) * y: the sign of y (nl.mod); kMod is C's fmod
};

// Activation functions of the Scalar engine, computed in FP32.
enum class Act : uint8_t {
  kCopy, kExp, kLog, kSqrt, kRsqrt, kReciprocal, kTanh, kSigmoid, kRelu, kGelu, kGeluTanh,
  kSilu, kSoftplus, kErf, kSin, kCos, kAbs, kSquare, kSign, kNegate, kMish, kArctan,
  kTan, kCeil, kFloor, kTrunc, kGeluDx, kGeluSigmoid, kGeluSigmoidDx, kSiluDx, kErfDx,
  kLogicalNot,
  kPrelu,  // x > 0 ? x : slope * x (activate2's relu_param)
};

// A runtime offset (NkiTensor.ap(scalar_offset=), t[:, i], t[:, nl.ds(i, n)] with a register i, or
// select(d, <[1, 1] tile>)): one operand of the instruction moves by `stride` elements per unit of
// an integer the kernel holds when the instruction runs (a register, or a [1, 1] int32 SBUF
// tile), read each time it runs. The operand's view in the instruction is its place at value 0;
// a value outside [0, count) is an error naming the kernel line (AWS's oob_mode.error), or with
// `skip` (oob_mode.skip, DMA only) the instruction moves nothing. The interpreter places the
// operand before the instruction runs; the timeline counts its every possible place.
struct RuntimeOffset {
  int32_t operand = 0;  // 0 dst, 1..6 a..f
  View index;           // one integer element
  int64_t stride = 0;
  int64_t count = 0;
  bool skip = false;
};

// How an instruction's free-dim reduction (alu2, into the engine's accumulators e) starts: the
// accumulator registers carry over between instructions of one engine (nki.isa.reduce_cmd).
enum class ReduceCmd : uint8_t { kIdle, kReset, kReduce, kResetReduce, kLoadReduce };

struct Instruction {
  Opcode op = Opcode::kTensorCopy;
  Engine engine = Engine::kVector;
  int32_t program = 0;  // SPMD program (kernel[grid]): each runs on its own engines
  int32_t line = 0;     // kernel source line, for messages
  // dst and the operands. tensor_scalar / activation also use d (the reduction result, [P,1]),
  // e (the engine's accumulators, [128,1] FP32) and f (load_reduce's initial values).
  View dst, a, b, c, d, e, f;
  Alu alu0 = Alu::kBypass, alu1 = Alu::kBypass;
  Alu alu2 = Alu::kBypass;  // the free-dim reduction of tensor_scalar / activation
  bool reverse0 = false, reverse1 = false;
  double imm0 = 0, imm1 = 0, imm2 = 0;
  Act act = Act::kCopy;
  uint32_t axes = 0;  // tensor_reduce: bit k reduces dim k of a; dma_copy: 1 for a DMA transpose;
                      // matmul: 1 for double-row mode; dma_indirect: 1 for a scatter, 2 to skip
  bool negate = false;
  bool accumulate = false;
  ReduceCmd reduce_cmd = ReduceCmd::kIdle;
  std::array<int64_t, kMaxDims> pattern{};  // iota steps per free dim of dst (dims 1..); a
                                             // tiled matmul's PE tile: start_row, row_size,
                                             // start_column, column_size (0s: the whole array)
  std::string text;                          // device_print label
  std::vector<int32_t> after;  // earlier instructions this one waits for (NkiInstruction.depends_on)
  std::vector<RuntimeOffset> offsets;  // operands placed when the instruction runs
};

// The operand `k` of an instruction (0 dst, 1..6 a..f).
const View& operand_view(const Instruction& in, int32_t k);
View& operand_view(Instruction& in, int32_t k);
// [lowest, end) of the elements operand `view` (operand k of `in`) may touch, over every value of
// its runtime offsets.
void operand_reach(const Instruction& in, int32_t k, const View& view, int64_t& lo, int64_t& hi);

struct Program {
  std::string name;
  std::vector<Buffer> buffers;
  std::vector<Instruction> instructions;
};

}  // namespace nrtsim::nki
