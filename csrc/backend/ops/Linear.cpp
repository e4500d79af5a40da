// Matrix products: mm, bmm, addmm, baddbmm and their vector forms. On nrtsim they run ATen's CPU
// BLAS on the device buffers; on a NeuronCore they occupy the Tensor engine. linear and matmul
// are composites that reach these.
#include <torch/library.h>

#include "backend/core/BoxedHostMath.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kMatmul{"matmul", nrtsim::Engine::kTensor, &flops::matmul_by_schema};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_host_math_ops(m, kMatmul, {
      "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "dot", "vdot", "addr",
      "_addmm_activation",
  });
}

}  // namespace
}  // namespace torch_neuronx
