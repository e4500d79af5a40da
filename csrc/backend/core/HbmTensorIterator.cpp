#include "backend/core/HbmTensorIterator.h"

#include <ATen/EmptyTensor.h>

#include "backend/core/CachingAllocator.h"

namespace torch_neuronx {

const at::Tensor& HbmTensorIterator::maybe_get_output(int64_t output_idx) {
  TORCH_INTERNAL_ASSERT(output_idx == 0, "HbmTensorIterator serves single-output ops");
  return out_;
}

void HbmTensorIterator::set_output_raw_strided(int64_t output_idx, c10::IntArrayRef sizes,
                                               c10::IntArrayRef strides,
                                               c10::TensorOptions options) {
  TORCH_INTERNAL_ASSERT(output_idx == 0 && !out_.defined(),
                        "HbmTensorIterator serves single-output functional ops");
  constexpr c10::DispatchKeySet kNeuronKeys(c10::DispatchKey::PrivateUse1);
  out_ = strides.empty()
             ? at::detail::empty_generic(sizes, &caching_allocator(), kNeuronKeys,
                                         options.dtype().toScalarType(), std::nullopt)
             : at::detail::empty_strided_generic(sizes, strides, &caching_allocator(),
                                                 kNeuronKeys, options.dtype().toScalarType());
  at::TensorIteratorBase::set_output_raw_strided(output_idx, sizes, strides, options);
}

}  // namespace torch_neuronx
