// Resampling and pooling: nearest/linear/bilinear/bicubic upsampling, max/avg/adaptive pooling,
// im2col/col2im and grid sampling, forward and backward. What vision models and
// diffusion VAEs use around their convolutions. Windowed reads and reductions: Vector engine.
#include <torch/library.h>

#include "backend/core/BoxedHostMath.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kResampling{"resampling", nrtsim::Engine::kVector, &flops::per_element};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_host_math_ops(m, kResampling, {
      "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
      "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
      "upsample_linear1d", "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
      "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa",
      "upsample_nearest1d_backward", "upsample_nearest2d_backward", "upsample_nearest3d_backward",
      "_upsample_nearest_exact1d_backward", "_upsample_nearest_exact2d_backward",
      "_upsample_nearest_exact3d_backward", "upsample_linear1d_backward",
      "upsample_bilinear2d_backward", "upsample_bicubic2d_backward",
      "upsample_trilinear3d_backward",
      "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "max_pool3d_with_indices",
      "max_pool3d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward", "avg_pool3d",
      "avg_pool3d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
      "adaptive_avg_pool2d", "_adaptive_avg_pool3d", "_adaptive_avg_pool3d_backward",
      "adaptive_max_pool2d", "adaptive_max_pool2d_backward", "max_unpool2d", "max_unpool3d",
      "im2col", "col2im", "grid_sampler_2d",
      "grid_sampler_2d_backward",
  });
}

}  // namespace
}  // namespace torch_neuronx
