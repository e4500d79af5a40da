// Convolutions (conv1d/2d/3d and their transposes) forward and backward.
//
// ATen routes every convolution on a backend without its own kernels to convolution_overrideable
// and convolution_backward_overrideable, which have no CPU kernel: the CPU fallback cannot serve
// them. These kernels run ATen's CPU convolution on the device buffers, one launch each; on a
// NeuronCore a convolution is a sequence of matmuls on the Tensor engine.
#include <ATen/core/Tensor.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <torch/library.h>

#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"
#include "backend/core/OpWork.h"

namespace torch_neuronx {
namespace {

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
  at::Tensor output;
  Kernel kernel("aten::convolution_overrideable", input.device(),
                work::convolution(input, weight, bias, stride, padding, dilation, transposed));
  kernel.run([&] {
    output = kernel.result(at::convolution(host_view(input), host_view(weight), host_view(bias),
                                           stride, padding, dilation, transposed, output_padding,
                                           groups));
  });
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  // The bias has one element per output channel; its gradient sums grad_output over the rest.
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  const std::vector<int64_t> bias_sizes{out_channels};
  at::Tensor grad_input, grad_weight, grad_bias;
  Kernel kernel("aten::convolution_backward_overrideable", input.device(),
                work::convolution_backward(grad_output, input, weight, stride, padding, dilation,
                                           transposed, output_mask[0], output_mask[1]));
  kernel.run([&] {
    auto [gi, gw, gb] = at::convolution_backward(
        host_view(grad_output), host_view(input), host_view(weight),
        output_mask[2] ? at::OptionalIntArrayRef(bias_sizes) : std::nullopt, stride, padding,
        dilation, transposed, output_padding, groups, output_mask);
    grad_input = kernel.result(gi);
    grad_weight = kernel.result(gw);
    grad_bias = kernel.result(gb);
  });
  return {grad_input, grad_weight, grad_bias};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
}

}  // namespace
}  // namespace torch_neuronx
