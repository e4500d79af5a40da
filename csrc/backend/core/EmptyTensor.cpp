#include "backend/core/EmptyTensor.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>

#include "backend/core/CachingAllocator.h"

namespace torch_neuronx {
namespace {
constexpr c10::DispatchKeySet kNeuronKeys(c10::DispatchKey::PrivateUse1);
}  // namespace

bool fill_uninitialized_memory() {
  const auto& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

at::Tensor empty_neuron(c10::IntArrayRef sizes, c10::ScalarType dtype,
                        std::optional<c10::MemoryFormat> memory_format) {
  return at::detail::empty_generic(sizes, &caching_allocator(), kNeuronKeys, dtype,
                                   memory_format);
}

at::Tensor empty_strided_neuron(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                c10::ScalarType dtype) {
  return at::detail::empty_strided_generic(sizes, strides, &caching_allocator(), kNeuronKeys,
                                           dtype);
}

}  // namespace torch_neuronx
