// The DispatchStub calls, alone in this file: CMake compiles it with the CPU-capability macros
// torch's own build used (HAVE_AVX2/AVX512_CPU_DEFINITION), which give DispatchStub the layout
// and the exported entry points of libtorch_cpu. Elsewhere the header would declare a different
// DispatchStubImpl::get_call_ptr, one libtorch does not export.
#include <ATen/native/BinaryOps.h>

#include "backend/core/HbmTensorIterator.h"

namespace torch_neuronx::cpu_stub {

void add(at::TensorIteratorBase& iter, const c10::Scalar& alpha) {
  at::native::add_stub(c10::DeviceType::CPU, iter, alpha);
}
void mul(at::TensorIteratorBase& iter) { at::native::mul_stub(c10::DeviceType::CPU, iter); }
void div_true(at::TensorIteratorBase& iter) {
  at::native::div_true_stub(c10::DeviceType::CPU, iter);
}

}  // namespace torch_neuronx::cpu_stub
