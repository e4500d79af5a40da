#include "runtime/nki/TileLoops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/nki/Alu.h"

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace nrtsim::nki {
namespace {

// A scan's partitions advance kLanes at a time, each lane one partition's chain, over blocks of
// kBlock elements that are transposed into lane-major order (element k of every lane side by
// side) so that one vector operation advances every lane's chain by one step.
constexpr int kLanes = 16;
constexpr int64_t kBlock = 64;

// t[k * kLanes + l] = rows[l * per + k] for l < lanes and k < kb; 0 for the lanes beyond.
void to_lanes(const float* rows, int64_t per, int lanes, int64_t kb, float* t) {
  int l = 0;
#if defined(__SSE2__)
  if (kb % 4 == 0) {
    for (; l + 4 <= lanes; l += 4) {
      const float* r = rows + l * per;
      for (int64_t k = 0; k < kb; k += 4) {
        __m128 a = _mm_loadu_ps(r + k), b = _mm_loadu_ps(r + per + k);
        __m128 c = _mm_loadu_ps(r + 2 * per + k), d = _mm_loadu_ps(r + 3 * per + k);
        _MM_TRANSPOSE4_PS(a, b, c, d);
        _mm_storeu_ps(t + k * kLanes + l, a);
        _mm_storeu_ps(t + (k + 1) * kLanes + l, b);
        _mm_storeu_ps(t + (k + 2) * kLanes + l, c);
        _mm_storeu_ps(t + (k + 3) * kLanes + l, d);
      }
    }
  }
#endif
  for (; l < lanes; ++l) {
    for (int64_t k = 0; k < kb; ++k) t[k * kLanes + l] = rows[l * per + k];
  }
  for (; l < kLanes; ++l) {
    for (int64_t k = 0; k < kb; ++k) t[k * kLanes + l] = 0.0f;
  }
}

// The inverse of to_lanes for the first `lanes` lanes.
void from_lanes(const float* t, int lanes, int64_t kb, float* rows, int64_t per) {
  int l = 0;
#if defined(__SSE2__)
  if (kb % 4 == 0) {
    for (; l + 4 <= lanes; l += 4) {
      float* r = rows + l * per;
      for (int64_t k = 0; k < kb; k += 4) {
        __m128 a = _mm_loadu_ps(t + k * kLanes + l), b = _mm_loadu_ps(t + (k + 1) * kLanes + l);
        __m128 c = _mm_loadu_ps(t + (k + 2) * kLanes + l), d = _mm_loadu_ps(t + (k + 3) * kLanes + l);
        _MM_TRANSPOSE4_PS(a, b, c, d);
        _mm_storeu_ps(r + k, a);
        _mm_storeu_ps(r + per + k, b);
        _mm_storeu_ps(r + 2 * per + k, c);
        _mm_storeu_ps(r + 3 * per + k, d);
      }
    }
  }
#endif
  for (; l < lanes; ++l) {
    for (int64_t k = 0; k < kb; ++k) rows[l * per + k] = t[k * kLanes + l];
  }
}

template <bool R0, bool R1, class F0, class F1>
void chain(F0 op0, F1 op1, float* state, const float* xt, const float* yt, float* ot, int64_t kb) {
  float s[kLanes];
  std::memcpy(s, state, sizeof s);
  for (int64_t k = 0; k < kb; ++k) {
    const float* xk = xt + k * kLanes;
    const float* yk = yt + k * kLanes;
    float* ok = ot + k * kLanes;
    for (int l = 0; l < kLanes; ++l) {
      const float t = R0 ? op0(s[l], xk[l]) : op0(xk[l], s[l]);
      s[l] = R1 ? op1(yk[l], t) : op1(t, yk[l]);
      ok[l] = s[l];
    }
  }
  std::memcpy(state, s, sizeof s);
}

template <class F0, class F1>
void scan_with(F0 op0, F1 op1, bool reverse0, bool reverse1, const float* x, const float* y,
               const float* init, float start, int64_t parts, int64_t per, float* out) {
  alignas(64) float xt[kBlock * kLanes], yt[kBlock * kLanes], ot[kBlock * kLanes];
  for (int64_t q0 = 0; q0 < parts; q0 += kLanes) {
    const int lanes = static_cast<int>(std::min<int64_t>(kLanes, parts - q0));
    float state[kLanes] = {};
    for (int l = 0; l < lanes; ++l) state[l] = init ? init[q0 + l] : start;
    for (int64_t k0 = 0; k0 < per; k0 += kBlock) {
      const int64_t kb = std::min(kBlock, per - k0);
      const int64_t at = q0 * per + k0;
      // Both operands' block is read before any of its results is written (out may be x or y).
      to_lanes(x + at, per, lanes, kb, xt);
      to_lanes(y + at, per, lanes, kb, yt);
      if (reverse0) {
        if (reverse1) chain<true, true>(op0, op1, state, xt, yt, ot, kb);
        else chain<true, false>(op0, op1, state, xt, yt, ot, kb);
      } else {
        if (reverse1) chain<false, true>(op0, op1, state, xt, yt, ot, kb);
        else chain<false, false>(op0, op1, state, xt, yt, ot, kb);
      }
      from_lanes(ot, lanes, kb, out + at, per);
    }
  }
}

// max / min over one row, kLanes interleaved subsequences at a time. Every lane starts at `acc`;
// max(max(acc, lane 0), lane 1, ...) is the row's maximum, NaN (the constant) wherever the plain
// fold gives NaN, and the same element's bits unless the maximum is zero, where the plain fold
// keeps the first zero it meets and a lane fold may keep another (-0 == +0): those rows are folded
// again in order.
template <bool kIsMax, class F>
float fold_lanes(F f, float acc, const float* row, int64_t n) {
  const float start = acc;
  int64_t e = 0;
#if defined(__SSE2__)
  if (n >= 2 * kLanes) {
    // std::max(a, b) is (a < b) ? b : a, which MAXPS(b, a) computes; MINPS(b, a) likewise
    // std::min. NaN in either gives the NaN constant, as f does.
    const __m128 nan = _mm_set1_ps(NAN);
    __m128 lane[4];
    for (__m128& v : lane) v = _mm_set1_ps(acc);
    for (; e + kLanes <= n; e += kLanes) {
      for (int j = 0; j < 4; ++j) {
        const __m128 x = _mm_loadu_ps(row + e + 4 * j);
        const __m128 m = kIsMax ? _mm_max_ps(x, lane[j]) : _mm_min_ps(x, lane[j]);
        const __m128 u = _mm_cmpunord_ps(lane[j], x);
        lane[j] = _mm_or_ps(_mm_and_ps(u, nan), _mm_andnot_ps(u, m));
      }
    }
    alignas(16) float v[kLanes];
    for (int j = 0; j < 4; ++j) _mm_store_ps(v + 4 * j, lane[j]);
    for (float x : v) acc = f(acc, x);
  }
#endif
  for (; e < n; ++e) acc = f(acc, row[e]);
  if (acc == 0.0f) {
    acc = start;
    for (int64_t k = 0; k < n; ++k) acc = f(acc, row[k]);
  }
  return acc;
}

}  // namespace

void scan_partitions(Alu op0, Alu op1, bool reverse0, bool reverse1, const float* x,
                     const float* y, const float* init, float start, int64_t parts, int64_t per,
                     float* out) {
  with_alu(op0, [&](auto f0) {
    with_alu(op1, [&](auto f1) {
      scan_with(f0, f1, reverse0, reverse1, x, y, init, start, parts, per, out);
    });
  });
}

void reduce_rows(Alu op, const float* x, int64_t rows, int64_t per, float* out) {
  if (op == Alu::kMax || op == Alu::kMin) {
    with_alu(op, [&](auto f) {
      for (int64_t r = 0; r < rows; ++r) {
        out[r] = op == Alu::kMax ? fold_lanes<true>(f, out[r], x + r * per, per)
                                 : fold_lanes<false>(f, out[r], x + r * per, per);
      }
    });
    return;
  }
  with_alu(op, [&](auto f) {
    for (int64_t r = 0; r < rows; ++r) {
      float acc = out[r];
      const float* row = x + r * per;
      for (int64_t e = 0; e < per; ++e) acc = f(acc, row[e]);
      out[r] = acc;
    }
  });
}

int64_t find_first_of(const float* x, int64_t n, const float* want, int n_want) {
  int64_t i = 0;
#if defined(__SSE2__)
  // Blocks of 16 without a match are skipped with vector compares (CMPEQPS is ==: NaN equals
  // nothing, -0 equals +0).
  __m128 w[8];
  for (int k = 0; k < n_want && k < 8; ++k) w[k] = _mm_set1_ps(want[k]);
  if (n_want <= 8) {
    for (; i + 16 <= n; i += 16) {
      const __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
      const __m128 c = _mm_loadu_ps(x + i + 8), d = _mm_loadu_ps(x + i + 12);
      __m128 hit = _mm_setzero_ps();
      for (int k = 0; k < n_want; ++k) {
        hit = _mm_or_ps(hit, _mm_or_ps(_mm_or_ps(_mm_cmpeq_ps(a, w[k]), _mm_cmpeq_ps(b, w[k])),
                                       _mm_or_ps(_mm_cmpeq_ps(c, w[k]), _mm_cmpeq_ps(d, w[k]))));
      }
      if (_mm_movemask_ps(hit)) break;
    }
  }
#endif
  for (; i < n; ++i) {
    for (int k = 0; k < n_want; ++k) {
      if (x[i] == want[k]) return i;
    }
  }
  return n;
}

}  // namespace nrtsim::nki
