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
// Whether new memory is filled rather than left as the allocator held it: under
// torch.use_deterministic_algorithms(True) with torch.utils.deterministic.fill_uninitialized_memory
// (its default), empty, empty_strided and the new part of a resize_ hold NaN (integers: their
// maximum), as on the CPU and CUDA. The allocation ops do it; kernels' own outputs, which they
// overwrite whole, do not need it.
bool fill_uninitialized_memory();

// Tensor of `sizes` with exactly `strides`.
at::Tensor empty_strided_neuron(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                c10::ScalarType dtype);

}  // namespace torch_neuronx
