// The two ops torch.amp.GradScaler("neuron") runs every step: unscale-and-check-for-inf over the
// gradients, and the loss-scale update. ATen's CPU kernels on host views of the device buffers.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale_native.h>
#include <ATen/ops/_amp_update_scale_native.h>
#include <torch/library.h>

#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {
namespace {

void check_same_device(const at::Tensor& reference, const at::Tensor& t, const char* op,
                       const char* what) {
  TORCH_CHECK(t.device() == reference.device(), op, ": ", what, " is on ", t.device(),
              " but the scale is on ", reference.device(), "; keep all of them on one device");
}

void non_finite_check_and_unscale_(at::TensorList grads, at::Tensor& found_inf,
                                   const at::Tensor& inv_scale) {
  constexpr const char* kOp = "aten::_amp_foreach_non_finite_check_and_unscale_";
  check_same_device(inv_scale, found_inf, kOp, "found_inf");
  uint64_t elements = 0;
  for (const auto& g : grads) {
    check_same_device(inv_scale, g, kOp, "a gradient");
    elements += static_cast<uint64_t>(g.numel());
  }
  // A check and a multiply per element; every gradient is read and written back.
  Kernel kernel(kOp, inv_scale.device(), Engine::kVector);
  kernel.reads(grads).reads(inv_scale).reads(found_inf).writes(grads).writes(found_inf);
  kernel.ops(2 * elements).run([&] {
    auto views = host_views(grads);
    at::Tensor found = host_view(found_inf);
    at::native::_amp_foreach_non_finite_check_and_unscale_cpu_(views, found, host_view(inv_scale));
  });
}

at::Tensor& update_scale_(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                          double growth_factor, double backoff_factor, int64_t growth_interval) {
  constexpr const char* kOp = "aten::_amp_update_scale_";
  check_same_device(self, growth_tracker, kOp, "growth_tracker");
  check_same_device(self, found_inf, kOp, "found_inf");
  Kernel kernel(kOp, self.device(), Engine::kScalar);
  kernel.reads(self).reads(growth_tracker).reads(found_inf).writes(self).writes(growth_tracker);
  kernel.ops(4).run([&] {
    at::Tensor scale = host_view(self);
    at::Tensor tracker = host_view(growth_tracker);
    at::native::_amp_update_scale_cpu_(scale, tracker, host_view(found_inf), growth_factor,
                                       backoff_factor, growth_interval);
  });
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", TORCH_FN(non_finite_check_and_unscale_));
  m.impl("_amp_update_scale_", TORCH_FN(update_scale_));
}

}  // namespace
}  // namespace torch_neuronx
