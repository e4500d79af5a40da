#include "runtime/transport/Reduce.h"

#include <algorithm>
#include <complex>
#include <cstring>
#include <string>

#include "runtime/Error.h"

namespace nrtsim::transport {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kOpaque1: return 1;
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kInt32:
    case DType::kUInt32:
    case DType::kFloat32: return 4;
    case DType::kInt64:
    case DType::kUInt64:
    case DType::kFloat64:
    case DType::kComplex64: return 8;
    case DType::kComplex128: return 16;
  }
  return 1;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "bool";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kUInt16: return "uint16";
    case DType::kInt32: return "int32";
    case DType::kUInt32: return "uint32";
    case DType::kInt64: return "int64";
    case DType::kUInt64: return "uint64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kComplex64: return "complex64";
    case DType::kComplex128: return "complex128";
    case DType::kOpaque1: return "a 1-byte type without arithmetic";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kProduct: return "PRODUCT";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kMax: return "MAX";
    case ReduceOp::kBand: return "BAND";
    case ReduceOp::kBor: return "BOR";
    case ReduceOp::kBxor: return "BXOR";
  }
  return "?";
}

namespace {

bool is_integral(DType d) {
  switch (d) {
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kInt32:
    case DType::kUInt32:
    case DType::kInt64:
    case DType::kUInt64: return true;
    default: return false;
  }
}

bool is_complex(DType d) { return d == DType::kComplex64 || d == DType::kComplex128; }

// bfloat16 <-> float: the upper half of a float's bits, rounded to nearest even on the way down.
struct BF16 {
  uint16_t bits;
};
inline float load(const BF16& v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline BF16 store_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BF16{static_cast<uint16_t>((u >> 16) | 0x40)};  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return BF16{static_cast<uint16_t>(u >> 16)};
}

// How elements of T are combined: in Acc, converted from and to T.
template <class T>
struct Traits {
  using Acc = T;
  static Acc in(const T& v) { return v; }
  static T out(const Acc& a) { return a; }
};
template <>
struct Traits<_Float16> {
  using Acc = float;
  static float in(const _Float16& v) { return static_cast<float>(v); }
  static _Float16 out(float a) { return static_cast<_Float16>(a); }
};
template <>
struct Traits<BF16> {
  using Acc = float;
  static float in(const BF16& v) { return load(v); }
  static BF16 out(float a) { return store_bf16(a); }
};
template <>
struct Traits<bool> {
  using Acc = uint8_t;  // stored bools are 0 or 1; results are normalised back to 0 or 1
  static uint8_t in(const bool& v) { return v ? 1 : 0; }
  static bool out(uint8_t a) { return a != 0; }
};

template <class A>
A nan_aware_min(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return b < a ? b : a;
}
template <class A>
A nan_aware_max(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? b : a;
}

template <class T, ReduceOp kOp>
void reduce_typed(void* dst_raw, const void* const* srcs_raw, int n, size_t count) {
  using Tr = Traits<T>;
  using A = typename Tr::Acc;
  constexpr size_t kBlock = 1024;  // accumulators stay in L1; blocks make the inner loops vectorise
  A acc[kBlock];
  T* dst = static_cast<T*>(dst_raw);
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t len = std::min(kBlock, count - begin);
    const T* first = static_cast<const T*>(srcs_raw[0]) + begin;
    for (size_t i = 0; i < len; ++i) acc[i] = Tr::in(first[i]);
    for (int s = 1; s < n; ++s) {
      const T* src = static_cast<const T*>(srcs_raw[s]) + begin;
      for (size_t i = 0; i < len; ++i) {
        const A v = Tr::in(src[i]);
        if constexpr (std::is_same_v<T, bool>) {
          if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kMax || kOp == ReduceOp::kBor) {
            acc[i] = acc[i] | v;
          } else if constexpr (kOp == ReduceOp::kBxor) {
            acc[i] = acc[i] ^ v;
          } else {
            acc[i] = acc[i] & v;
          }
        } else if constexpr (kOp == ReduceOp::kSum) {
          acc[i] = acc[i] + v;
        } else if constexpr (kOp == ReduceOp::kProduct) {
          acc[i] = acc[i] * v;
        } else if constexpr (kOp == ReduceOp::kMin) {
          acc[i] = nan_aware_min(acc[i], v);
        } else if constexpr (kOp == ReduceOp::kMax) {
          acc[i] = nan_aware_max(acc[i], v);
        } else if constexpr (kOp == ReduceOp::kBand) {
          acc[i] = acc[i] & v;
        } else if constexpr (kOp == ReduceOp::kBor) {
          acc[i] = acc[i] | v;
        } else {
          acc[i] = acc[i] ^ v;
        }
      }
    }
    T* out = dst + begin;
    for (size_t i = 0; i < len; ++i) out[i] = Tr::out(acc[i]);
  }
}

template <class T>
void dispatch_op(void* dst, const void* const* srcs, int n, size_t count, ReduceOp op) {
  constexpr bool kOrdered = !std::is_same_v<T, std::complex<float>> &&
                            !std::is_same_v<T, std::complex<double>>;
  constexpr bool kBitwise = std::is_integral_v<T>;
  switch (op) {
    case ReduceOp::kSum: return reduce_typed<T, ReduceOp::kSum>(dst, srcs, n, count);
    case ReduceOp::kProduct: return reduce_typed<T, ReduceOp::kProduct>(dst, srcs, n, count);
    case ReduceOp::kMin:
      if constexpr (kOrdered) return reduce_typed<T, ReduceOp::kMin>(dst, srcs, n, count);
      break;
    case ReduceOp::kMax:
      if constexpr (kOrdered) return reduce_typed<T, ReduceOp::kMax>(dst, srcs, n, count);
      break;
    case ReduceOp::kBand:
      if constexpr (kBitwise) return reduce_typed<T, ReduceOp::kBand>(dst, srcs, n, count);
      break;
    case ReduceOp::kBor:
      if constexpr (kBitwise) return reduce_typed<T, ReduceOp::kBor>(dst, srcs, n, count);
      break;
    case ReduceOp::kBxor:
      if constexpr (kBitwise) return reduce_typed<T, ReduceOp::kBxor>(dst, srcs, n, count);
      break;
  }
}

}  // namespace

bool reduce_supported(DType dtype, ReduceOp op) {
  if (dtype == DType::kOpaque1) return false;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProduct: return true;
    case ReduceOp::kMin:
    case ReduceOp::kMax: return !is_complex(dtype);
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor: return is_integral(dtype);
  }
  return false;
}

void reduce(void* dst, const void* const* srcs, int n, size_t count, DType dtype, ReduceOp op) {
  if (!reduce_supported(dtype, op)) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("reduce op ") + reduce_op_name(op) + " is not defined for " +
                    dtype_name(dtype) +
                    (op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor
                         ? " (bitwise reductions take integer or bool tensors)"
                         : " (complex numbers have no ordering; reduce real and imaginary parts)"));
  }
  if (n <= 0 || count == 0) return;
  switch (dtype) {
    case DType::kBool: return dispatch_op<bool>(dst, srcs, n, count, op);
    case DType::kUInt8: return dispatch_op<uint8_t>(dst, srcs, n, count, op);
    case DType::kInt8: return dispatch_op<int8_t>(dst, srcs, n, count, op);
    case DType::kInt16: return dispatch_op<int16_t>(dst, srcs, n, count, op);
    case DType::kUInt16: return dispatch_op<uint16_t>(dst, srcs, n, count, op);
    case DType::kInt32: return dispatch_op<int32_t>(dst, srcs, n, count, op);
    case DType::kUInt32: return dispatch_op<uint32_t>(dst, srcs, n, count, op);
    case DType::kInt64: return dispatch_op<int64_t>(dst, srcs, n, count, op);
    case DType::kUInt64: return dispatch_op<uint64_t>(dst, srcs, n, count, op);
    case DType::kFloat16: return dispatch_op<_Float16>(dst, srcs, n, count, op);
    case DType::kBFloat16: return dispatch_op<BF16>(dst, srcs, n, count, op);
    case DType::kFloat32: return dispatch_op<float>(dst, srcs, n, count, op);
    case DType::kFloat64: return dispatch_op<double>(dst, srcs, n, count, op);
    case DType::kComplex64: return dispatch_op<std::complex<float>>(dst, srcs, n, count, op);
    case DType::kComplex128: return dispatch_op<std::complex<double>>(dst, srcs, n, count, op);
    case DType::kOpaque1: break;
  }
}

}  // namespace nrtsim::transport
