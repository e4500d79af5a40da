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
  // addr_ is a composite calling addr.out(self, ..., out=self), and the CPU's addr.out tells the
  // in-place call (no broadcasting of self: a 0-d self is refused) from an explicit out= by the
  // two arguments being one C++ reference. Through the boxed kernel above they are two, and a
  // 0-d self was broadcast and resized instead of refused; run on the host whole, addr_ keeps it.
  register_host_math_overloads(m, kMatmul, {"addr_"});
}

}  // namespace
}  // namespace torch_neuronx
