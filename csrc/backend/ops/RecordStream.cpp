// record_stream: Tensor.record_stream(stream) tells the caching allocator that the tensor's memory
// is in use on `stream` (FSDP and hand-written overlap code call it). It needs a kernel of its
// own: the CPU fallback would run it on a host copy, where CPU tensors have no streams.
#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <torch/library.h>

#include "backend/core/CachingAllocator.h"

namespace torch_neuronx {
namespace {

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: a neuron tensor can only be recorded on a neuron stream, got a "
              "stream on ", stream.device());
  caching_allocator().recordStream(self.storage().data_ptr(), stream);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(record_stream));
}

}  // namespace
}  // namespace torch_neuronx
