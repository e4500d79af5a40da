// A CPU tensor that aliases a neuron tensor's memory (same storage bytes, sizes, strides, offset).
// nrtsim's HBM is host memory, so a kernel may compute with ATen's CPU math directly on device
// buffers through such a view: no copy, and it is still our kernel, launched through our path.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace torch_neuronx {

at::Tensor host_view(const at::Tensor& neuron_tensor);
std::optional<at::Tensor> host_view(const std::optional<at::Tensor>& neuron_tensor);
std::vector<at::Tensor> host_views(at::TensorList neuron_tensors);

}  // namespace torch_neuronx
