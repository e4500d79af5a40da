// Element types and reductions of the collective transport. Torch-free: the transport moves and
// combines raw buffers, the way a device's collective engine does, so the backend layer only
// names the element type and the operation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nrtsim::transport {

enum class DType : uint8_t {
  kBool,
  kUInt8,
  kInt8,
  kInt16,
  kUInt16,
  kInt32,
  kUInt32,
  kInt64,
  kUInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kComplex64,
  kComplex128,
  kOpaque1,  // a 1-byte type without arithmetic (float8): moves only, no reductions
};
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

// SUM, AVG and PREMUL_SUM all reduce with kSum: the backend scales before or after.
enum class ReduceOp : uint8_t { kSum, kProduct, kMin, kMax, kBand, kBor, kBxor };
const char* reduce_op_name(ReduceOp op);

// Whether `op` is defined for `dtype` (bitwise ops need integers or bool, MIN/MAX need an
// ordering, so no complex; nothing is defined for opaque types).
bool reduce_supported(DType dtype, ReduceOp op);

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], combined in that order, for
// `count` elements. dst may be one of srcs. 16-bit floats are combined in float and rounded once
// (to nearest even), so every rank that computes the same element gets the same bits.
// Throws nrtsim::Error(kInvalidArgument) when !reduce_supported(dtype, op).
void reduce(void* dst, const void* const* srcs, int n, size_t count, DType dtype, ReduceOp op);

}  // namespace nrtsim::transport
