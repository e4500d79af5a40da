// The ALU operations of the Vector and GpSimd engines on FP32 values, for the interpreter's
// loops (Interpreter.cpp, TileLoops.cpp). Comparisons give 1.0 or 0.0; max / min propagate NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/nki/Program.h"

namespace nrtsim::nki {

inline float apply_alu(Alu op, float x, float y) {
  switch (op) {
    case Alu::kBypass: return x;
    case Alu::kAdd: return x + y;
    case Alu::kSubtract: return x - y;
    case Alu::kMultiply: return x * y;
    case Alu::kDivide: return x / y;
    case Alu::kMax: return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y);
    case Alu::kMin: return std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y);
    case Alu::kPow: return std::pow(x, y);
    case Alu::kMod: return std::fmod(x, y);
    case Alu::kEqual: return x == y ? 1.0f : 0.0f;
    case Alu::kNotEqual: return x != y ? 1.0f : 0.0f;
    case Alu::kGreater: return x > y ? 1.0f : 0.0f;
    case Alu::kGreaterEqual: return x >= y ? 1.0f : 0.0f;
    case Alu::kLess: return x < y ? 1.0f : 0.0f;
    case Alu::kLessEqual: return x <= y ? 1.0f : 0.0f;
    case Alu::kLogicalAnd: return (x != 0 && y != 0) ? 1.0f : 0.0f;
    case Alu::kLogicalOr: return (x != 0 || y != 0) ? 1.0f : 0.0f;
    case Alu::kLogicalXor: return ((x != 0) != (y != 0)) ? 1.0f : 0.0f;
    case Alu::kBitwiseAnd:
      return static_cast<float>(static_cast<int64_t>(x) & static_cast<int64_t>(y));
    case Alu::kBitwiseOr:
      return static_cast<float>(static_cast<int64_t>(x) | static_cast<int64_t>(y));
    case Alu::kBitwiseXor:
      return static_cast<float>(static_cast<int64_t>(x) ^ static_cast<int64_t>(y));
    case Alu::kAbsMax: return std::max(std::fabs(x), std::fabs(y));
    case Alu::kAbsMin: return std::min(std::fabs(x), std::fabs(y));
    case Alu::kShiftLeft:
      return static_cast<float>(static_cast<uint32_t>(static_cast<int64_t>(x))
                                << (static_cast<int64_t>(y) & 31));
    case Alu::kShiftRight:
      return static_cast<float>(static_cast<uint32_t>(static_cast<int64_t>(x)) >>
                                (static_cast<int64_t>(y) & 31));
    case Alu::kFloorMod: {
      const float r = std::fmod(x, y);
      return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
    }
  }
  return x;
}

// Calls body(f) with f(a, b) = a op b: the common operations as functors of their own, so the
// loops in body inline them (no switch per element) and vectorise where they can; apply_alu for
// the rest. Same values as apply_alu.
template <class Body>
inline void with_alu(Alu op, Body&& body) {
  switch (op) {
    case Alu::kAdd: return body([](float a, float b) { return a + b; });
    case Alu::kSubtract: return body([](float a, float b) { return a - b; });
    case Alu::kMultiply: return body([](float a, float b) { return a * b; });
    case Alu::kDivide: return body([](float a, float b) { return a / b; });
    case Alu::kMax:
      return body([](float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); });
    case Alu::kMin:
      return body([](float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); });
    default: return body([op](float a, float b) { return apply_alu(op, a, b); });
  }
}

inline float reduce_identity(Alu op) {
  switch (op) {
    case Alu::kMultiply:
    case Alu::kLogicalAnd: return 1.0f;
    case Alu::kMax: return -INFINITY;
    case Alu::kMin: return INFINITY;
    default: return 0.0f;
  }
}

}  // namespace nrtsim::nki
