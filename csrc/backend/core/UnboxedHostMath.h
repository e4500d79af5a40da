// Unboxed host-math kernels, for the hottest ops (arithmetic, sum): ATen's CPU kernel run on host
// views of the neuron buffers (HostView.h) inside one launch, without the boxed argument stack
// that dominates the cost of an op on a small tensor. Work is derived from the actual tensors:
// every input read (broadcast dimensions once), the output written, one op per output element
// unless the caller says otherwise.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "backend/core/DeviceCheck.h"
#include "backend/core/FlopModels.h"
#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {

// What an unboxed host-math op is: its name, its engine, and whether its arithmetic is one op per
// output element (elementwise) or per input element (reductions).
struct HostMathOp {
  enum class OpsPer { kOutputElement, kInputElement };
  const char* op;
  Engine engine;
  OpsPer ops_per = OpsPer::kOutputElement;
};

namespace detail {
template <class... Inputs>
uint64_t input_elements(const Inputs&... inputs) {
  return (uint64_t{0} + ... + flops::elementwise(inputs));
}
}  // namespace detail

// The out= form: `compute(out_view, input_views...)` runs the CPU kernel; `out` may be resized by
// it. An input that is `out` itself (an in-place op's self) is passed as out's view
// (CallHostViews).
template <class Compute, class... Inputs>
at::Tensor& host_math_out(const HostMathOp& what, at::Tensor& out, Compute&& compute,
                          const Inputs&... inputs) {
  check_out_devices(what.op, out, {&inputs...});
  Kernel kernel(what.op, out.device(), what.engine);
  (kernel.reads(inputs), ...);
  kernel.run([&] {
    CallHostViews views;
    at::Tensor out_view = views.view(out, /*resizable=*/true);
    compute(out_view, views.view(inputs)...);
    adopt_host_view(out_view, out);
    kernel.writes(out).ops(what.ops_per == HostMathOp::OpsPer::kInputElement
                               ? detail::input_elements(inputs...)
                               : flops::elementwise(out));
  });
  return out;
}

// The functional form: `compute(input_views...)` returns the CPU kernel's fresh result, which is
// allocated in HBM of `device` and becomes the neuron result without a copy.
template <class Compute, class... Inputs>
at::Tensor host_math(const HostMathOp& what, c10::Device device, Compute&& compute,
                     const Inputs&... inputs) {
  check_input_devices(what.op, device, {&inputs...});
  Kernel kernel(what.op, device, what.engine);
  (kernel.reads(inputs), ...);
  at::Tensor result;
  kernel.run([&] {
    CallHostViews views;
    result = kernel.result(compute(views.view(inputs)...));
    kernel.ops(what.ops_per == HostMathOp::OpsPer::kInputElement
                   ? detail::input_elements(inputs...)
                   : flops::elementwise(result));
  });
  return result;
}

}  // namespace torch_neuronx
