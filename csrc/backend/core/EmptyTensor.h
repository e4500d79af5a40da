// Where every neuron tensor is born: uninitialised storage from the caching allocator on the
// current neuron device. aten::empty / empty_strided return these, and kernels that build their
// own outputs (HbmTensorIterator) call them directly rather than dispatching again.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

namespace torch_neuronx {

// Contiguous (or `memory_format`) tensor of `sizes`.
at::Tensor empty_neuron(c10::IntArrayRef sizes, c10::ScalarType dtype,
                        std::optional<c10::MemoryFormat> memory_format = std::nullopt);
// Tensor of `sizes` with exactly `strides`.
at::Tensor empty_strided_neuron(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                c10::ScalarType dtype);

}  // namespace torch_neuronx
