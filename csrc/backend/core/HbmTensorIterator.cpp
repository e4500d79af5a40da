#include "backend/core/HbmTensorIterator.h"

#include "backend/core/EmptyTensor.h"

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
  const auto dtype = options.dtype().toScalarType();
  // Without strides, TensorIterator names the output's layout by memory format: contiguous, or
  // channels-last when every operand is channels-last (its fast setup). Dropping the format would
  // label the channels-last result NCHW while the CPU loop writes it in NHWC order.
  out_ = strides.empty() ? empty_neuron(sizes, dtype, options.memory_format_opt())
                         : empty_strided_neuron(sizes, strides, dtype);
  at::TensorIteratorBase::set_output_raw_strided(output_idx, sizes, strides, options);
}

}  // namespace torch_neuronx
