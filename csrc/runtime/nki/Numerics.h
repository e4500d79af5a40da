// Storage formats as the hardware writes them: engines compute in FP32 and round to the
// destination's format on write, round-to-nearest-even (the NeuronCore default; stochastic
// rounding is not modelled). Overflow goes to infinity where the format has one; e4m3fn, which has
// none, saturates at +-448 (as torch's conversion does).
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/nki/Program.h"

namespace nrtsim::nki {

inline float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// Small float formats (FP16 and the FP8 variants): decode through a table, encode by rounding the
// magnitude to the format's grid.
float small_float_decode(DType dtype, uint32_t bits);
uint32_t small_float_encode(DType dtype, float value);

// The values inside MX x4 packs: one FP8 (e5m2 / e4m3fn) value per byte, one FP4 e2m1 value per
// nibble. decode takes the byte / nibble; encode rounds to nearest even, saturating at the
// format's largest finite value (MX element formats have no infinities).
float mx_value_decode(DType packed, uint32_t code);
uint32_t mx_value_encode(DType packed, float value);
// The power of two a float8_e8m0fnu scale byte stands for (255 is NaN).
float e8m0_decode(uint8_t bits);

// `n` values of `dtype` at `src`, `stride` elements apart, into floats.
void load_run(DType dtype, const uint8_t* src, int64_t stride, int64_t n, float* out);
// `n` floats into `dtype` at `dst`, `stride` elements apart, rounded as stored.
void store_run(DType dtype, uint8_t* dst, int64_t stride, int64_t n, const float* in);
// Fills `elements` of `dtype` with the poison of fresh memory: NaN for floats, 0xcd bytes for
// integers, so reads of uninitialised memory show.
void poison(DType dtype, uint8_t* dst, int64_t elements);

}  // namespace nrtsim::nki
