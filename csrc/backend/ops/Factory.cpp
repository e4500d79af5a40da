// Allocation ops: empty and empty_strided, the two through which every neuron tensor is born
// (empty_like, empty_permuted, new_empty and the rest reach one of them).
#include <ATen/core/Tensor.h>
#include <ATen/native/TensorFactories.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "backend/core/EmptyTensor.h"

namespace torch_neuronx {
namespace {

c10::Device target_device(std::optional<c10::Device> device) {
  return device.value_or(c10::Device(c10::DeviceType::PrivateUse1));
}

// Every memory format is computed as the CPU computes it: a format is a choice of strides, and
// strides are all the host math needs. TorchNeuron refuses channels-last formats (its strict
// mode fails on them); the portability report names each request as something that will not
// port (torch_neuronx/portability).
at::Tensor fill_if_deterministic(at::Tensor t) {
  if (C10_UNLIKELY(fill_uninitialized_memory())) at::native::fill_empty_deterministic_(t);
  return t;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "neuron tensors must use the strided layout, got ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "pin_memory=True only applies to CPU tensors");
  const c10::DeviceGuard guard(target_device(device));
  return fill_if_deterministic(empty_neuron(size, c10::dtype_or_default(dtype), memory_format));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "neuron tensors must use the strided layout, got ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "pin_memory=True only applies to CPU tensors");
  const c10::DeviceGuard guard(target_device(device));
  return fill_if_deterministic(empty_strided_neuron(size, stride, c10::dtype_or_default(dtype)));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
}

}  // namespace
}  // namespace torch_neuronx
