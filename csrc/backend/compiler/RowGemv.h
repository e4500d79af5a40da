// The matrix-vector product of a one-row matrix and a transposed weight, x (1 x K) @ W^T with
// W (N x K) row-major: what a linear layer computes for one token (a decode step). Each output
// element is the dot product of x with one contiguous row of W, so the work is one pass over W,
// and its time is memory traffic. MKL runs this shape on one thread whatever the size; one core
// alone draws about half of this host's memory bandwidth (measured: 16-18 GB/s on one thread,
// 30 GB/s on two, reading 64 MiB), so this kernel splits W's rows over the intra-op threads once
// W is large enough for the split to pay.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_neuronx {

// Whether row_gemv computes x @ weight_t: float32, x of shape (1, K), weight_t of shape (K, N)
// with unit stride along K (the transpose of a row-major weight), so each row of W is contiguous.
bool row_gemv_applies(const at::Tensor& x, const at::Tensor& weight_t);

// x @ weight_t into `out` (float32, shape (1, N), unit stride along N); requires
// row_gemv_applies(x, weight_t). Rows are split over the intra-op threads (and over the threads a
// SingleThreaded scope put aside: OuterThreads) once W holds more than a few pages per thread.
void row_gemv(const at::Tensor& x, const at::Tensor& weight_t, at::Tensor& out);

}  // namespace torch_neuronx
