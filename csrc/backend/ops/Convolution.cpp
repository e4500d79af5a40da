// Convolutions (conv1d/2d/3d and their transposes) forward and backward.
//
// ATen routes every convolution on a backend without its own kernels to convolution_overrideable
// and convolution_backward_overrideable, which have no CPU kernel: the CPU fallback cannot serve
// them. These kernels run ATen's CPU convolution on the device buffers, one launch each; on a
// NeuronCore a convolution is a sequence of matmuls on the Tensor engine.
#include <ATen/core/Tensor.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {
namespace {

// 2 * multiply-adds: each output element (each input element, transposed) takes one per weight
// element of its group.
uint64_t conv_flops(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef padding,
                    at::IntArrayRef stride, at::IntArrayRef dilation, bool transposed) {
  if (weight.dim() != input.dim() || weight.size(0) == 0) return 0;
  int64_t elements = input.numel();
  if (!transposed) {
    elements = 1;
    for (int64_t size : at::native::conv_output_size(input.sizes(), weight.sizes(), padding,
                                                     stride, dilation)) {
      elements *= size;
    }
  }
  return static_cast<uint64_t>(2 * elements * (weight.numel() / weight.size(0)));
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
  const c10::DeviceGuard guard(input.device());
  at::Tensor output;
  launch_kernel(input.device().index(),
                KernelInfo{"aten::convolution_overrideable",
                           conv_flops(input, weight, padding, stride, dilation, transposed),
                           tensor_bytes(input) + tensor_bytes(weight), Engine::kTensor},
                [&] {
                  const HostAllocationsInHbm results_in_hbm(input.device().index());
                  output = move_to_hbm(
                      at::convolution(host_view(input), host_view(weight), host_view(bias), stride,
                                      padding, dilation, transposed, output_padding, groups),
                      input.device());
                });
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  const c10::DeviceGuard guard(input.device());
  // The bias has one element per output channel; its gradient sums grad_output over the rest.
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  const std::vector<int64_t> bias_sizes{out_channels};
  at::Tensor grad_input, grad_weight, grad_bias;
  const uint64_t bytes = tensor_bytes(grad_output) + tensor_bytes(input) + tensor_bytes(weight);
  launch_kernel(
      input.device().index(),
      KernelInfo{"aten::convolution_backward_overrideable",
                 2 * conv_flops(input, weight, padding, stride, dilation, transposed), bytes,
                 Engine::kTensor},
      [&] {
        const HostAllocationsInHbm results_in_hbm(input.device().index());
        auto [gi, gw, gb] = at::convolution_backward(
            host_view(grad_output), host_view(input), host_view(weight),
            output_mask[2] ? at::OptionalIntArrayRef(bias_sizes) : std::nullopt, stride, padding,
            dilation, transposed, output_padding, groups, output_mask);
        grad_input = move_to_hbm(gi, input.device());
        grad_weight = move_to_hbm(gw, input.device());
        grad_bias = move_to_hbm(gb, input.device());
      });
  return {grad_input, grad_weight, grad_bias};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
}

}  // namespace
}  // namespace torch_neuronx
