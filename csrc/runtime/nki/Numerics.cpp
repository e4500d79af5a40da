#include "runtime/nki/Numerics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

namespace nrtsim::nki {
namespace {

struct SmallFormat {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_inf;    // IEEE-style: all-ones exponent is inf/NaN
  float max_finite;
};

SmallFormat format_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return {5, 10, 15, true, 65504.0f};
    case DType::kFloat8E4M3: return {4, 3, 7, true, 240.0f};
    case DType::kFloat8E4M3Fn: return {4, 3, 7, false, 448.0f};
    case DType::kFloat8E5M2: return {5, 2, 15, true, 57344.0f};
    default: return {8, 23, 127, true, std::numeric_limits<float>::max()};
  }
}

float decode(const SmallFormat& f, uint32_t bits) {
  const uint32_t mant_mask = (1u << f.mantissa_bits) - 1;
  const uint32_t exp_mask = (1u << f.exponent_bits) - 1;
  const bool negative = (bits >> (f.exponent_bits + f.mantissa_bits)) & 1u;
  const uint32_t e = (bits >> f.mantissa_bits) & exp_mask;
  const uint32_t m = bits & mant_mask;
  float v;
  if (f.has_inf && e == exp_mask) {
    v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (!f.has_inf && e == exp_mask && m == mant_mask) {
    v = std::numeric_limits<float>::quiet_NaN();  // e4m3fn: only S.1111.111 is NaN
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), 1 - f.bias - f.mantissa_bits);
  } else {
    v = std::ldexp(static_cast<float>(m | (1u << f.mantissa_bits)),
                   static_cast<int>(e) - f.bias - f.mantissa_bits);
  }
  return negative ? -v : v;
}

uint32_t encode(const SmallFormat& f, float value) {
  const uint32_t sign = std::signbit(value) ? 1u << (f.exponent_bits + f.mantissa_bits) : 0u;
  const uint32_t exp_mask = (1u << f.exponent_bits) - 1;
  const uint32_t mant_mask = (1u << f.mantissa_bits) - 1;
  const uint32_t nan = f.has_inf ? (exp_mask << f.mantissa_bits) | (1u << (f.mantissa_bits - 1))
                                 : (exp_mask << f.mantissa_bits) | mant_mask;
  const uint32_t inf = f.has_inf ? exp_mask << f.mantissa_bits : nan;
  if (std::isnan(value)) return sign | nan;
  const double a = std::fabs(static_cast<double>(value));
  if (a == 0) return sign;
  if (std::isinf(value)) return sign | (f.has_inf ? inf : nan - 1);
  int e;
  std::frexp(a, &e);
  e -= 1;  // a = 1.x * 2^e
  const int emin = 1 - f.bias;
  if (e < emin) e = emin;
  // The mantissa (with its implicit bit) as an integer, rounded to nearest even.
  double q = std::nearbyint(std::ldexp(a, f.mantissa_bits - e));
  if (q >= std::ldexp(1.0, f.mantissa_bits + 1)) {
    q = std::ldexp(q, -1);
    e += 1;
  }
  if (std::ldexp(q, e - f.mantissa_bits) > f.max_finite) {
    // Without an infinity (e4m3fn) the conversion saturates at the largest finite value, as
    // torch's float8_e4m3fn conversion does.
    return f.has_inf ? sign | inf : sign | (nan - 1);
  }
  const auto mant = static_cast<uint32_t>(q);
  if (mant < (1u << f.mantissa_bits)) return sign | mant;  // subnormal
  const auto biased = static_cast<uint32_t>(e + f.bias);
  return sign | (biased << f.mantissa_bits) | (mant & mant_mask);
}

struct Tables {
  std::vector<float> fp16;
  std::array<std::array<float, 256>, 3> fp8{};
  Tables() : fp16(65536) {
    for (uint32_t i = 0; i < 65536; ++i) fp16[i] = decode(format_of(DType::kFloat16), i);
    const DType fp8_types[3] = {DType::kFloat8E4M3, DType::kFloat8E4M3Fn, DType::kFloat8E5M2};
    for (int t = 0; t < 3; ++t) {
      for (uint32_t i = 0; i < 256; ++i) fp8[t][i] = decode(format_of(fp8_types[t]), i);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

const float* table_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return tables().fp16.data();
    case DType::kFloat8E4M3: return tables().fp8[0].data();
    case DType::kFloat8E4M3Fn: return tables().fp8[1].data();
    case DType::kFloat8E5M2: return tables().fp8[2].data();
    default: return nullptr;
  }
}

template <class T>
void load_typed(const uint8_t* src, int64_t stride, int64_t n, float* out) {
  const T* p = reinterpret_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i * stride]);
}

template <class T>
T saturate_int(float v) {
  // Float to integer conversion saturates at the type's range; NaN becomes 0.
  if (std::isnan(v)) return 0;
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  const double r = std::nearbyint(static_cast<double>(v));
  return static_cast<T>(r < lo ? lo : (r > hi ? hi : r));
}

template <class T>
void store_int(uint8_t* dst, int64_t stride, int64_t n, const float* in) {
  T* p = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) p[i * stride] = saturate_int<T>(in[i]);
}

// e2m1 (FP4): 1 sign, 2 exponent, 1 mantissa bit; no infinities or NaN; largest 6.
constexpr float kFp4Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

uint32_t fp4_encode(float value) {
  const uint32_t sign = std::signbit(value) ? 8u : 0u;
  if (std::isnan(value)) return sign | 7u;  // no NaN in e2m1: saturate
  const float a = std::fabs(value);
  uint32_t best = 0;
  for (uint32_t i = 1; i < 8; ++i) {
    const float d = std::fabs(a - kFp4Values[i]), db = std::fabs(a - kFp4Values[best]);
    // Ties go to the even code (an even mantissa bit).
    if (d < db || (d == db && (i & 1u) == 0)) best = i;
  }
  return sign | best;
}

}  // namespace

float mx_value_decode(DType packed, uint32_t code) {
  switch (packed) {
    case DType::kFloat8E5M2x4: return tables().fp8[2][code & 0xffu];
    case DType::kFloat8E4M3Fnx4: return tables().fp8[1][code & 0xffu];
    default: return (code & 8u) ? -kFp4Values[code & 7u] : kFp4Values[code & 7u];
  }
}

uint32_t mx_value_encode(DType packed, float value) {
  switch (packed) {
    case DType::kFloat8E5M2x4: {
      // MX elements saturate: the quantizer's scale keeps values in range, and OCP MX conversion
      // clamps rather than overflowing to infinity.
      const float m = 57344.0f;
      return encode(format_of(DType::kFloat8E5M2), std::isnan(value) ? value
                                                                     : std::clamp(value, -m, m));
    }
    case DType::kFloat8E4M3Fnx4: return encode(format_of(DType::kFloat8E4M3Fn), value);
    default: return fp4_encode(value);
  }
}

float e8m0_decode(uint8_t bits) {
  return bits == 0xffu ? std::numeric_limits<float>::quiet_NaN()
                       : std::ldexp(1.0f, static_cast<int>(bits) - 127);
}

float small_float_decode(DType dtype, uint32_t bits) { return decode(format_of(dtype), bits); }
uint32_t small_float_encode(DType dtype, float value) { return encode(format_of(dtype), value); }

void load_run(DType dtype, const uint8_t* src, int64_t stride, int64_t n, float* out) {
  switch (dtype) {
    case DType::kFloat32:
      if (stride == 1) {
        std::memcpy(out, src, static_cast<size_t>(n) * 4);
      } else {
        load_typed<float>(src, stride, n, out);
      }
      return;
    case DType::kBFloat16: {
      const auto* p = reinterpret_cast<const uint16_t*>(src);
      if (stride == 1) {
        // Contiguous runs get their own loop so the compiler vectorises it.
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(p[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(p[i * stride]);
      }
      return;
    }
    case DType::kFloat16: {
      const float* t = table_of(dtype);
      const auto* p = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) out[i] = t[p[i * stride]];
      return;
    }
    case DType::kFloat8E4M3:
    case DType::kFloat8E4M3Fn:
    case DType::kFloat8E5M2: {
      const float* t = table_of(dtype);
      for (int64_t i = 0; i < n; ++i) out[i] = t[src[i * stride]];
      return;
    }
    case DType::kInt32: load_typed<int32_t>(src, stride, n, out); return;
    case DType::kUInt32: load_typed<uint32_t>(src, stride, n, out); return;
    case DType::kInt16: load_typed<int16_t>(src, stride, n, out); return;
    case DType::kUInt16: load_typed<uint16_t>(src, stride, n, out); return;
    case DType::kInt8: load_typed<int8_t>(src, stride, n, out); return;
    case DType::kUInt8: load_typed<uint8_t>(src, stride, n, out); return;
    case DType::kFloat8E8M0:
      for (int64_t i = 0; i < n; ++i) out[i] = e8m0_decode(src[i * stride]);
      return;
    // Packs are not numbers; the front end lets only MX instructions and same-dtype (raw) copies
    // touch them. Their bits read as an unsigned integer here.
    case DType::kFloat8E5M2x4:
    case DType::kFloat8E4M3Fnx4: load_typed<uint32_t>(src, stride, n, out); return;
    case DType::kFloat4E2M1Fnx4: load_typed<uint16_t>(src, stride, n, out); return;
  }
}

void store_run(DType dtype, uint8_t* dst, int64_t stride, int64_t n, const float* in) {
  switch (dtype) {
    case DType::kFloat32:
      if (stride == 1) {
        std::memcpy(dst, in, static_cast<size_t>(n) * 4);
      } else {
        float* p = reinterpret_cast<float*>(dst);
        for (int64_t i = 0; i < n; ++i) p[i * stride] = in[i];
      }
      return;
    case DType::kBFloat16: {
      auto* p = reinterpret_cast<uint16_t*>(dst);
      if (stride == 1) {
        for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(in[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) p[i * stride] = float_to_bf16(in[i]);
      }
      return;
    }
    case DType::kFloat16: {
      const SmallFormat f = format_of(dtype);
      auto* p = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) p[i * stride] = static_cast<uint16_t>(encode(f, in[i]));
      return;
    }
    case DType::kFloat8E4M3:
    case DType::kFloat8E4M3Fn:
    case DType::kFloat8E5M2: {
      const SmallFormat f = format_of(dtype);
      for (int64_t i = 0; i < n; ++i) dst[i * stride] = static_cast<uint8_t>(encode(f, in[i]));
      return;
    }
    case DType::kInt32: store_int<int32_t>(dst, stride, n, in); return;
    case DType::kUInt32: store_int<uint32_t>(dst, stride, n, in); return;
    case DType::kInt16: store_int<int16_t>(dst, stride, n, in); return;
    case DType::kUInt16: store_int<uint16_t>(dst, stride, n, in); return;
    case DType::kInt8: store_int<int8_t>(dst, stride, n, in); return;
    case DType::kUInt8: store_int<uint8_t>(dst, stride, n, in); return;
    case DType::kFloat8E8M0:
      // The nearest power of two at or below the value, as a biased exponent (NaN and <= 0: 255).
      for (int64_t i = 0; i < n; ++i) {
        const float v = in[i];
        int e = 0;
        if (!(v > 0) || std::isinf(v)) {
          dst[i * stride] = 0xffu;
          continue;
        }
        std::frexp(v, &e);
        dst[i * stride] = static_cast<uint8_t>(std::clamp(e - 1 + 127, 0, 254));
      }
      return;
    case DType::kFloat8E5M2x4:
    case DType::kFloat8E4M3Fnx4: store_int<uint32_t>(dst, stride, n, in); return;
    case DType::kFloat4E2M1Fnx4: store_int<uint16_t>(dst, stride, n, in); return;
  }
}

void poison(DType dtype, uint8_t* dst, int64_t elements) {
  if (!dtype_is_float(dtype) || dtype_is_packed(dtype)) {
    std::memset(dst, 0xcd, static_cast<size_t>(elements) * dtype_size(dtype));
    return;
  }
  // One element's NaN in the dtype, stored over `dst` element by element: no allocation (a
  // kernel of many small tiles poisons one at nearly every instruction).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint8_t one[4] = {};
  store_run(dtype, one, 1, 1, &nan);
  switch (dtype_size(dtype)) {
    case 4: {
      uint32_t w;
      std::memcpy(&w, one, 4);
      for (int64_t i = 0; i < elements; ++i) std::memcpy(dst + i * 4, &w, 4);
      return;
    }
    case 2: {
      uint16_t h;
      std::memcpy(&h, one, 2);
      for (int64_t i = 0; i < elements; ++i) std::memcpy(dst + i * 2, &h, 2);
      return;
    }
    default: std::memset(dst, one[0], static_cast<size_t>(elements)); return;
  }
}

}  // namespace nrtsim::nki
