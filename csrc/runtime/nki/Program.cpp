#include "runtime/nki/Program.h"

#include <algorithm>

namespace nrtsim::nki {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32: return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
    case DType::kInt16:
    case DType::kUInt16: return 2;
    case DType::kFloat8E5M2x4:
    case DType::kFloat8E4M3Fnx4: return 4;
    case DType::kFloat4E2M1Fnx4: return 2;
    default: return 1;
  }
}

bool dtype_is_packed(DType dtype) {
  return dtype == DType::kFloat8E5M2x4 || dtype == DType::kFloat8E4M3Fnx4 ||
         dtype == DType::kFloat4E2M1Fnx4;
}

bool dtype_is_float(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kBFloat16:
    case DType::kFloat16:
    case DType::kFloat8E4M3:
    case DType::kFloat8E4M3Fn:
    case DType::kFloat8E5M2:
    case DType::kFloat8E8M0:
    case DType::kFloat8E5M2x4:
    case DType::kFloat8E4M3Fnx4:
    case DType::kFloat4E2M1Fnx4: return true;
    default: return false;
  }
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kFloat8E4M3: return "float8_e4m3";
    case DType::kFloat8E4M3Fn: return "float8_e4m3fn";
    case DType::kFloat8E5M2: return "float8_e5m2";
    case DType::kInt32: return "int32";
    case DType::kUInt32: return "uint32";
    case DType::kInt16: return "int16";
    case DType::kUInt16: return "uint16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kFloat8E8M0: return "float8_e8m0fnu";
    case DType::kFloat8E5M2x4: return "float8_e5m2_x4";
    case DType::kFloat8E4M3Fnx4: return "float8_e4m3fn_x4";
    case DType::kFloat4E2M1Fnx4: return "float4_e2m1fn_x4";
  }
  return "?";
}

const char* memory_name(Memory memory) {
  switch (memory) {
    case Memory::kHbm: return "hbm";
    case Memory::kSbuf: return "sbuf";
    case Memory::kPsum: return "psum";
  }
  return "?";
}

const char* opcode_name(Opcode op) {
  switch (op) {
    case Opcode::kDmaCopy: return "dma_copy";
    case Opcode::kTensorCopy: return "tensor_copy";
    case Opcode::kTensorTensor: return "tensor_tensor";
    case Opcode::kTensorScalar: return "tensor_scalar";
    case Opcode::kActivation: return "activation";
    case Opcode::kTensorReduce: return "tensor_reduce";
    case Opcode::kMatmul: return "nc_matmul";
    case Opcode::kTranspose: return "nc_transpose";
    case Opcode::kIota: return "iota";
    case Opcode::kMemset: return "memset";
    case Opcode::kSelect: return "select";
    case Opcode::kPrint: return "device_print";
    case Opcode::kScan: return "tensor_tensor_scan";
    case Opcode::kPartitionReduce: return "tensor_partition_reduce";
    case Opcode::kAffineSelect: return "affine_select";
    case Opcode::kBnStats: return "bn_stats";
    case Opcode::kBnAggr: return "bn_aggr";
    case Opcode::kMax8: return "max8";
    case Opcode::kFindIndex8: return "nc_find_index8";
    case Opcode::kMatchReplace8: return "nc_match_replace8";
    case Opcode::kQuantizeMx: return "quantize_mx";
    case Opcode::kMatmulMx: return "nc_matmul_mx";
    case Opcode::kCumulative: return "tensor_scalar_cumulative";
    case Opcode::kSelectReduce: return "select_reduce";
    case Opcode::kRangeSelect: return "range_select";
    case Opcode::kNonzeroWithCount: return "nonzero_with_count";
    case Opcode::kSequenceBounds: return "sequence_bounds";
    case Opcode::kStreamShuffle: return "nc_stream_shuffle";
    case Opcode::kLocalGather: return "local_gather";
    case Opcode::kNGather: return "nc_n_gather";
    case Opcode::kDmaCompute: return "dma_compute";
    case Opcode::kActivate2: return "activate2";
    case Opcode::kTopk: return "topk";
    case Opcode::kDmaIndirect: return "dma_indirect";
    case Opcode::kBarrier: return "core_barrier";
    case Opcode::kLoopBegin: return "loop_begin";
    case Opcode::kLoopEnd: return "loop_end";
    case Opcode::kCollective: return "collective";
    case Opcode::kTensorIndirect: return "tensor_indirect";
  }
  return "?";
}

int64_t View::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t View::free_size() const {
  int64_t n = 1;
  for (int i = 1; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t View::lowest() const {
  int64_t lo = offset;
  for (int i = 0; i < ndim; ++i) {
    if (stride[i] < 0 && shape[i] > 0) lo += stride[i] * (shape[i] - 1);
  }
  return lo;
}

int64_t View::end() const {
  if (numel() == 0) return offset;
  int64_t hi = offset;
  for (int i = 0; i < ndim; ++i) {
    if (stride[i] > 0) hi += stride[i] * (shape[i] - 1);
  }
  return hi + 1;
}

const View& operand_view(const Instruction& in, int32_t k) {
  switch (k) {
    case 1: return in.a;
    case 2: return in.b;
    case 3: return in.c;
    case 4: return in.d;
    case 5: return in.e;
    case 6: return in.f;
    default: return in.dst;
  }
}

View& operand_view(Instruction& in, int32_t k) {
  return const_cast<View&>(operand_view(static_cast<const Instruction&>(in), k));
}

void operand_reach(const Instruction& in, int32_t k, const View& view, int64_t& lo, int64_t& hi) {
  lo = view.lowest();
  hi = view.end();
  for (const RuntimeOffset& r : in.offsets) {
    if (r.operand != k || r.count < 1) continue;
    const int64_t far = r.stride * (r.count - 1);
    if (far > 0) hi += far;
    else lo += far;
  }
}

}  // namespace nrtsim::nki
