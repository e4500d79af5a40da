#include "backend/compiler/RowGemv.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "backend/compiler/SingleThreaded.h"

namespace torch_neuronx {
namespace {

// Bytes of W below which a share of rows is not worth a thread's wake-up (a few microseconds):
// at ~15 GB/s per core, 64 KiB streams in about 4 us.
constexpr int64_t kBytesPerThreadShare = 64 << 10;

// Lanes of independent partial sums per row: enough for the compiler to vectorize the loop
// (the lanes never mix until the end, so no reassociation is needed) and to keep several loads
// in flight.
constexpr int64_t kLanes = 16;

void dot_rows(const float* w, int64_t row_stride, const float* x, int64_t k, float* y,
              int64_t first, int64_t last) {
  for (int64_t n = first; n < last; ++n) {
    const float* row = w + n * row_stride;
    float lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= k; i += kLanes) {
      for (int64_t j = 0; j < kLanes; ++j) lanes[j] += row[i + j] * x[i + j];
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < kLanes; ++j) sum += lanes[j];
    for (; i < k; ++i) sum += row[i] * x[i];
    y[n] = sum;
  }
}

}  // namespace

bool row_gemv_applies(const at::Tensor& x, const at::Tensor& weight_t) {
  return x.scalar_type() == at::kFloat && weight_t.scalar_type() == at::kFloat && x.dim() == 2 &&
         weight_t.dim() == 2 && x.size(0) == 1 && x.size(1) == weight_t.size(0) &&
         (weight_t.stride(0) == 1 || weight_t.size(0) <= 1) && !x.is_conj() &&
         !weight_t.is_conj() && !x.is_neg() && !weight_t.is_neg();
}

void row_gemv(const at::Tensor& x, const at::Tensor& weight_t, at::Tensor& out) {
  TORCH_INTERNAL_ASSERT(row_gemv_applies(x, weight_t) && out.scalar_type() == at::kFloat &&
                        out.numel() == weight_t.size(1) &&
                        (out.size(-1) <= 1 || out.stride(-1) == 1));
  const int64_t k = x.size(1), n = weight_t.size(1);
  if (n == 0) return;
  float* y = out.data_ptr<float>();
  if (k == 0) {
    std::fill(y, y + n, 0.0f);
    return;
  }
  const at::Tensor xs = x.stride(1) == 1 ? x : x.contiguous();
  const float* xp = xs.data_ptr<float>();
  const float* w = weight_t.data_ptr<float>();
  const int64_t row_stride = weight_t.stride(1);
  const int64_t grain = std::max<int64_t>(1, kBytesPerThreadShare / (k * 4));
  const OuterThreads threads;
  at::parallel_for(0, n, grain, [&](int64_t first, int64_t last) {
    dot_rows(w, row_stride, xp, k, y, first, last);
  });
}

}  // namespace torch_neuronx
