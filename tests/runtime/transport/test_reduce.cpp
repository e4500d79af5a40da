// transport::reduce against a plain element-by-element reference: every source count the sweeps
// treat differently (one sweep of 1-4 sources; blocks with several sweeps beyond), lengths around
// the block size, dst aliasing a source, and the element types whose combination is not the
// element type's own arithmetic (16-bit floats in float, rounded once; bools kept 0 or 1).
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/transport/Reduce.h"

using namespace nrtsim::transport;

namespace {

const int kSources[] = {1, 2, 3, 4, 5, 7, 8, 9, 13};
const size_t kCounts[] = {1, 5, 1023, 1024, 1025, 3000};

// n sources of `count` values each, from `make(source, index)`.
template <class T, class Make>
std::vector<std::vector<T>> sources(int n, size_t count, Make make) {
  std::vector<std::vector<T>> s(n, std::vector<T>(count));
  for (int k = 0; k < n; ++k) {
    for (size_t i = 0; i < count; ++i) s[k][i] = make(k, i);
  }
  return s;
}

template <class T>
std::vector<T> reduced(const std::vector<std::vector<T>>& s, DType dtype, ReduceOp op,
                       int alias = -1) {
  std::vector<std::vector<T>> copy = s;
  std::vector<const void*> ptrs;
  for (auto& v : copy) ptrs.push_back(v.data());
  std::vector<T> out(s[0].size());
  T* dst = alias >= 0 ? copy[alias].data() : out.data();
  reduce(dst, ptrs.data(), static_cast<int>(s.size()), s[0].size(), dtype, op);
  return alias >= 0 ? copy[alias] : out;
}

// The reference: element by element, sources in order.
template <class T, class Acc, class Combine, class In, class Out>
std::vector<T> reference(const std::vector<std::vector<T>>& s, Combine combine, In in, Out out) {
  std::vector<T> r(s[0].size());
  for (size_t i = 0; i < r.size(); ++i) {
    Acc a = in(s[0][i]);
    for (size_t k = 1; k < s.size(); ++k) a = combine(a, in(s[k][i]));
    r[i] = out(a);
  }
  return r;
}

template <class T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want, int n, size_t count) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0)
      << n << " sources of " << count << " elements";
}

float uniform(int k, size_t i) {
  // Deterministic, varied magnitudes: sums depend on the order of combination.
  std::mt19937 g(static_cast<uint32_t>(k * 7919 + i));
  return std::ldexp(std::uniform_real_distribution<float>(-1.f, 1.f)(g), static_cast<int>(g() % 20) - 10);
}

}  // namespace

TEST(Reduce, Float32SumIsCombinedInSourceOrder) {
  for (int n : kSources) {
    for (size_t count : kCounts) {
      const auto s = sources<float>(n, count, uniform);
      const auto want = reference<float, float>(s, [](float a, float b) { return a + b; },
                                                [](float v) { return v; }, [](float a) { return a; });
      expect_same_bits(reduced(s, DType::kFloat32, ReduceOp::kSum), want, n, count);
      // dst is one of the sources (an in-place all_reduce): the same result.
      expect_same_bits(reduced(s, DType::kFloat32, ReduceOp::kSum, n / 2), want, n, count);
    }
  }
}

TEST(Reduce, MinAndMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int n : kSources) {
    for (size_t count : kCounts) {
      auto s = sources<float>(n, count, uniform);
      s[n - 1][count / 2] = nan;  // in the last source only: the last sweep must see it
      for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
        const auto got = reduced(s, DType::kFloat32, op);
        for (size_t i = 0; i < count; ++i) {
          float want = s[0][i];
          for (int k = 1; k < n; ++k) {
            const float v = s[k][i];
            if (std::isnan(want) || std::isnan(v)) {
              want = nan;
            } else {
              want = op == ReduceOp::kMin ? std::min(want, v) : std::max(want, v);
            }
          }
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got[i])) << n << " sources, element " << i;
          } else {
            EXPECT_EQ(got[i], want) << n << " sources, element " << i;
          }
        }
      }
    }
  }
}

TEST(Reduce, BFloat16SumsInFloatAndRoundsOnce) {
  auto to_bf16 = [](float f) {  // round to nearest even (finite values only here)
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  };
  auto to_float = [](uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (int n : kSources) {
    for (size_t count : {size_t{5}, size_t{1025}}) {
      const auto s = sources<uint16_t>(n, count, [&](int k, size_t i) { return to_bf16(uniform(k, i)); });
      const auto want = reference<uint16_t, float>(s, [](float a, float b) { return a + b; },
                                                   to_float, to_bf16);
      expect_same_bits(reduced(s, DType::kBFloat16, ReduceOp::kSum), want, n, count);
    }
  }
}

TEST(Reduce, IntegersAndBools) {
  for (int n : kSources) {
    const size_t count = 1500;
    const auto ints = sources<int32_t>(n, count, [](int k, size_t i) {
      return static_cast<int32_t>((k + 3) * 2654435761u ^ i * 40503u);
    });
    auto product = [](int32_t a, int32_t b) {
      return static_cast<int32_t>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
    };
    auto same = [](int32_t v) { return v; };
    expect_same_bits(reduced(ints, DType::kInt32, ReduceOp::kProduct),
                     reference<int32_t, int32_t>(ints, product, same, same), n, count);
    expect_same_bits(reduced(ints, DType::kInt32, ReduceOp::kBxor),
                     reference<int32_t, int32_t>(ints, [](int32_t a, int32_t b) { return a ^ b; },
                                                 same, same),
                     n, count);

    // Bools as torch stores them: one byte, 0 or 1.
    const auto flags = sources<uint8_t>(n, count, [](int k, size_t i) { return (i >> k) & 1; });
    std::vector<bool> any(count), all(count, true);
    for (int k = 0; k < n; ++k) {
      for (size_t i = 0; i < count; ++i) {
        any[i] = any[i] || flags[k][i];
        all[i] = all[i] && flags[k][i];
      }
    }
    const auto sum = reduced(flags, DType::kBool, ReduceOp::kSum);
    const auto band = reduced(flags, DType::kBool, ReduceOp::kBand);
    for (size_t i = 0; i < count; ++i) {  // results are 0 or 1 too
      ASSERT_EQ(sum[i], any[i] ? 1 : 0) << n << " sources, element " << i;
      ASSERT_EQ(band[i], all[i] ? 1 : 0) << n << " sources, element " << i;
    }
  }
}

TEST(Reduce, Complex64Sum) {
  using C = std::complex<float>;
  for (int n : kSources) {
    const auto s = sources<C>(n, 1100, [](int k, size_t i) { return C(uniform(k, i), uniform(k + 50, i)); });
    expect_same_bits(reduced(s, DType::kComplex64, ReduceOp::kSum),
                     reference<C, C>(s, [](C a, C b) { return a + b; }, [](C v) { return v; },
                                     [](C a) { return a; }),
                     n, 1100);
  }
}
