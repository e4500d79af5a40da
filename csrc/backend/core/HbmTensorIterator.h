// ATen's CPU loops run straight on neuron buffers. nrtsim's HBM is host memory, so the CPU
// kernel behind a DispatchStub (add_stub, mul_stub, ...) can read and write it through a
// TensorIterator built over the neuron tensors themselves: no host views to make, no host result
// to re-wrap. The iterator's fresh outputs are born in HBM of the current device. This is the
// latency floor of an elementwise op; UnboxedHostMath.h's views remain the general mechanism.
#pragma once

#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>

namespace torch_neuronx {

// Serves the functional forms: the output is always fresh (out= and in-place forms keep
// UnboxedHostMath.h's path).
class HbmTensorIterator final : public at::TensorIteratorBase {
 public:
  const at::Tensor& maybe_get_output(int64_t output_idx) override;
  void set_output_raw_strided(int64_t output_idx, c10::IntArrayRef sizes,
                              c10::IntArrayRef strides, c10::TensorOptions options) override;

  const at::Tensor& result() const { return out_; }

 private:
  at::Tensor out_;
};

// ATen's CPU elementwise kernels, called for DeviceType::CPU on an iterator over HBM. They live
// in CpuStubs.cpp, the one translation unit compiled with the DispatchStub layout torch was
// built with.
namespace cpu_stub {
void add(at::TensorIteratorBase& iter, const c10::Scalar& alpha);
void mul(at::TensorIteratorBase& iter);
void div_true(at::TensorIteratorBase& iter);
}  // namespace cpu_stub

}  // namespace torch_neuronx
