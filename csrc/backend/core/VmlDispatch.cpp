#include "backend/core/VmlDispatch.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <mutex>

namespace torch_neuronx {

// ATen sends contiguous float and double unary ops (exp, log, sqrt, tanh, ...) to oneMKL's VML,
// each intra-op thread with its own chunk. oneMKL picks each VML function's kernel lazily, on its
// first call; when that first call runs on several threads at once, one thread can compute its
// whole chunk with a low-accuracy kernel although high accuracy is asked for (oneMKL 2024.2, the
// version torch 2.13's wheels link; PyTorch issue 188792). Measured here with two threads: the
// first exp of a 64x64 tensor in a fresh process was off by up to 1.5e-4 relative (~1000 ulp) in
// one half of the elements in about one process of six. Eager neuron ops run these CPU kernels
// over HBM, so a neuron result, or the CPU reference it is compared with, inherited the error.
// One serial call per function and precision, below ATen's parallel grain, settles the dispatch
// for the life of the process.
void resolve_vml_dispatch() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::InferenceMode no_autograd;
    for (const auto dtype : {at::kFloat, at::kDouble}) {
      // In (0, 1): inside the domain of every function below.
      const at::Tensor x = at::full({16}, 0.5, at::TensorOptions().dtype(dtype));
      // The functions ATen implements with VML (ATen/cpu/vml.h, IMPLEMENT_VML_MKL).
      for (auto* function : {&at::acos, &at::asin, &at::atan, &at::cos, &at::erf, &at::erfc,
                             &at::erfinv, &at::exp, &at::log, &at::log10, &at::log2, &at::sin,
                             &at::sqrt, &at::tan, &at::tanh, &at::trunc}) {
        function(x);
      }
    }
  });
}

}  // namespace torch_neuronx
