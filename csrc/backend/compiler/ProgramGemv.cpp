// neuron_program::row_gemv, the one-row matrix product that compiled programs call where a graph
// multiplies one row by a transposed weight (a linear layer on one token: every projection of a
// decode step). backend.py rewrites such aten.mm nodes to it before Inductor compiles the graph;
// Inductor calls it as an external kernel, as it would have called mm. Its CPU kernel is
// RowGemv.h, split over the cores (MKL runs the shape on one); any other layout or dtype
// reaching it is computed by ATen's mm.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <c10/core/SymInt.h>
#include <torch/library.h>

#include "backend/compiler/RowGemv.h"

namespace torch_neuronx {
namespace {

at::Tensor row_gemv_cpu(const at::Tensor& x, const at::Tensor& weight_t) {
  TORCH_CHECK(x.dim() == 2 && weight_t.dim() == 2 && x.size(1) == weight_t.size(0),
              "neuron_program::row_gemv: expected (M, K) @ (K, N), got ", x.sizes(), " @ ",
              weight_t.sizes());
  if (!row_gemv_applies(x, weight_t)) return at::mm(x, weight_t);
  at::Tensor out = at::empty({1, weight_t.size(1)}, x.options());
  row_gemv(x, weight_t, out);
  return out;
}

at::Tensor row_gemv_meta(const at::Tensor& x, const at::Tensor& weight_t) {
  return at::empty_symint({x.sym_size(0), weight_t.sym_size(1)}, x.options());
}

TORCH_LIBRARY_FRAGMENT(neuron_program, m) {
  m.def("row_gemv(Tensor x, Tensor weight_t) -> Tensor");
}

TORCH_LIBRARY_IMPL(neuron_program, CPU, m) { m.impl("row_gemv", TORCH_FN(row_gemv_cpu)); }

TORCH_LIBRARY_IMPL(neuron_program, Meta, m) { m.impl("row_gemv", TORCH_FN(row_gemv_meta)); }

}  // namespace
}  // namespace torch_neuronx
