// resize_ and the set_ family: ops that change which bytes a tensor covers. Growing a storage goes
// through the hooks' resizePrivateUse1Bytes (a new HBM block, old contents copied).
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

void ensure_storage_bytes(const at::Tensor& self, size_t needed) {
  const c10::Storage& storage = self.storage();
  if (needed <= storage.nbytes()) return;
  const c10::DeviceGuard guard(self.device());
  at::native::resize_bytes_nocuda(storage, c10::SymInt(static_cast<int64_t>(needed)));
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  const auto format = memory_format.value_or(c10::MemoryFormat::Contiguous);
  for (const auto s : size) {
    TORCH_CHECK(s >= 0, "resize_: negative dimension ", s, " in size ", size);
  }
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() == size && !memory_format.has_value()) return self;
  impl->set_sizes_contiguous(size);
  // As on CPU: channels_last(_3d) restrides the dense layout (the same bytes, permuted).
  if (format != c10::MemoryFormat::Contiguous && format != c10::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(format);
  }
  if (impl->numel() > 0) {
    ensure_storage_bytes(self, at::detail::computeStorageNbytes(size, self.strides(),
                                                                self.itemsize(),
                                                                self.storage_offset()));
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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
}

}  // namespace
}  // namespace torch_neuronx
