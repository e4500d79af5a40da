// resize_ and the set_ family: ops that change which bytes a tensor covers, and is_set_to, which
// asks whether two tensors cover the same ones. Growing a storage goes
// through the hooks' resizePrivateUse1Bytes (a new HBM block, old contents copied).
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "backend/core/EmptyTensor.h"

namespace torch_neuronx {
namespace {

void ensure_storage_bytes(const at::Tensor& self, size_t needed) {
  const c10::Storage& storage = self.storage();
  if (needed <= storage.nbytes()) return;
  const c10::DeviceGuard guard(self.device());
  at::native::resize_bytes_nocuda(storage, c10::SymInt(static_cast<int64_t>(needed)));
}

// As the CPU's resize_: new sizes are laid out contiguously unless they equal the old ones; an
// explicit memory format then restrides them (channels-last included, see Factory.cpp); storage
// only grows; in deterministic mode the bytes it grew by are filled (EmptyTensor.h).
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  for (const auto s : size) {
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size,
                " (resize_ on ", self.device(), ")");
  }
  auto* impl = self.unsafeGetTensorImpl();
  const int64_t old_storage_nbytes =
      impl->unsafe_storage() ? static_cast<int64_t>(impl->unsafe_storage().nbytes()) : 0;
  if (self.sizes() != size) impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format",
                *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  if (impl->numel() > 0) {
    ensure_storage_bytes(self, at::detail::computeStorageNbytes(
                                   self.sizes(), self.strides(), self.itemsize(),
                                   self.storage_offset()));
  }
  if (C10_UNLIKELY(fill_uninitialized_memory())) {
    at::native::fill_resize_deterministic_(self, old_storage_nbytes);
  }
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                               c10::IntArrayRef size, c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, std::move(source), storage_offset, size, stride);
  std::vector<int64_t> strides(stride.begin(), stride.end());
  if (stride.data() == nullptr || stride.empty()) {
    const auto contiguous = c10::contiguous_strides(size);
    strides.assign(contiguous.begin(), contiguous.end());
  }
  self.unsafeGetTensorImpl()->set_sizes_and_strides(size, strides, storage_offset);
  if (self.numel() > 0) {
    ensure_storage_bytes(self, at::detail::computeStorageNbytes(size, strides, self.itemsize(),
                                                                storage_offset));
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.itemsize());
  return set_storage_offset(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(),
                            source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, self.storage().allocator(),
                     /*resizable=*/true);
  return set_storage_offset(self, std::move(empty), 0, {0}, {});
}

// Whether `self` covers exactly the bytes `source` covers, read off the tensors: through the CPU
// fallback it compared host copies, never the same storage, and always answered false.
bool is_set_to(const at::Tensor& self, const at::Tensor& source) {
  return self.storage().is_alias_of(source.storage()) &&
         self.storage_offset() == source.storage_offset() && self.sizes() == source.sizes() &&
         self.strides() == source.strides();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("is_set_to", TORCH_FN(is_set_to));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
}

}  // namespace
}  // namespace torch_neuronx
