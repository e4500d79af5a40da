// _has_compatible_shallow_copy_type: may a CPU tensor take a neuron tensor's data in place
// (`param.data = param.to("neuron")`)? Module.to() asks this for every parameter. With PyTorch's
// default (false between CPU and PrivateUse1) each module holding a shared parameter gets its own
// copy, silently untying tied weights (embeddings and lm_head). As between CPU and CUDA, dense
// strided tensors of the two devices are compatible.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

bool dense_host_or_neuron(const at::Tensor& t) {
  return t.layout() == c10::kStrided && !t.is_quantized() && !t.is_nested() &&
         (t.device().is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  return dense_host_or_neuron(self) && dense_host_or_neuron(from);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace
}  // namespace torch_neuronx
