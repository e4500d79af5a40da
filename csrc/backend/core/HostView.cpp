#include "backend/core/HostView.h"

#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

namespace torch_neuronx {

at::Tensor host_view(const at::Tensor& t) {
  if (!t.defined()) return t;
  TORCH_INTERNAL_ASSERT(t.device().type() == c10::DeviceType::PrivateUse1,
                        "host_view expects a neuron tensor, got one on ", t.device());
  const c10::Storage& storage = t.storage();
  // A non-owning storage over the same bytes: the neuron tensor keeps the memory alive for as
  // long as the kernel using the view runs.
  c10::Storage alias(c10::Storage::use_byte_size_t(), storage.nbytes(),
                     c10::DataPtr(storage.mutable_data(), c10::Device(c10::DeviceType::CPU)),
                     /*allocator=*/nullptr, /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(alias),
                                                   c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                   t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  at::Tensor view(std::move(impl));
  if (t.is_conj()) view._set_conj(true);
  if (t.is_neg()) view._set_neg(true);
  return view;
}

std::optional<at::Tensor> host_view(const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return std::nullopt;
  return host_view(*t);
}

std::vector<at::Tensor> host_views(at::TensorList tensors) {
  std::vector<at::Tensor> views;
  views.reserve(tensors.size());
  for (const auto& t : tensors) views.push_back(host_view(t));
  return views;
}

}  // namespace torch_neuronx
