// A CPU tensor that aliases a neuron tensor's memory (same storage bytes, sizes, strides, offset).
// nrtsim's HBM is host memory, so a kernel may compute with ATen's CPU math directly on device
// buffers through such a view: no copy, and it is still our kernel, launched through our path.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace torch_neuronx {

// A view with `resizable` set may be resized by the CPU code it is handed to: its storage then
// grows into fresh HBM of the tensor's device (the caller adopts it, see HostMathKernel).
//
// Views of one neuron storage that are alive at the same time on a thread share one host
// storage, as the neuron tensors share theirs: the CPU code then sees the aliasing the CPU would
// see, and its memory-overlap checks (at::assert_no_internal_overlap, assert_no_partial_overlap,
// assert_no_overlap) raise exactly where they raise on the CPU, e.g. for x[5:15].add_(x[0:10]) or
// torch.add(d[:3], 2, out=d[1:4]). With a storage of its own per view the CPU code could not
// tell, and computed order-dependent values.
at::Tensor host_view(const at::Tensor& neuron_tensor, bool resizable = false);
std::optional<at::Tensor> host_view(const std::optional<at::Tensor>& neuron_tensor);
std::vector<at::Tensor> host_views(at::TensorList neuron_tensors);

// After CPU code ran on a resizable host view of `original`: carry a resize (new HBM block,
// sizes, strides, offset) over to the neuron tensor.
void adopt_host_view(const at::Tensor& view, const at::Tensor& original);

// While alive, CPU tensors this thread allocates are placed in HBM of `device`: wrapped around a
// kernel's CPU code, its fresh results are already device memory.
class HostAllocationsInHbm {
 public:
  explicit HostAllocationsInHbm(c10::DeviceIndex device);
  ~HostAllocationsInHbm();
  HostAllocationsInHbm(const HostAllocationsInHbm&) = delete;
  HostAllocationsInHbm& operator=(const HostAllocationsInHbm&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// A neuron tensor on `device` with the contents, sizes and strides of `host_tensor`: how a kernel
// that computed a fresh result with ATen's CPU math hands it over. A result allocated in HBM (see
// HostAllocationsInHbm) that owns its block alone is taken over without a copy; anything else is
// copied.
at::Tensor move_to_hbm(const at::Tensor& host_tensor, c10::Device device);

}  // namespace torch_neuronx
