// _local_scalar_dense: Tensor.item() and every implicit host read of a one-element tensor.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <torch/library.h>

#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {
namespace {

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  // The read is a launch on the current stream, so it comes after every kernel queued before it:
  // one element over the host link.
  at::Scalar value;
  Kernel kernel("aten::_local_scalar_dense", self.device(), Engine::kDma, LaunchKind::kScalarRead);
  kernel.reads(self).run([&] { value = at::_local_scalar_dense(host_view(self)); });
  return value;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

}  // namespace
}  // namespace torch_neuronx
