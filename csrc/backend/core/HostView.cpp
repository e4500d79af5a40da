#include "backend/core/HostView.h"

#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <ATen/ops/empty_strided.h>

#include <cstring>

#include "backend/core/CachingAllocator.h"

namespace torch_neuronx {

namespace {
// HBM handed out as host memory: what a resizable host view grows into. The deleter is the caching
// allocator's, so the block returns to HBM whichever tensor ends up owning it.
class HbmAsHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DataPtr block = caching_allocator().allocate(nbytes);
    block.unsafe_set_device(c10::Device(c10::DeviceType::CPU));
    return block;
  }
  c10::DeleterFnPtr raw_deleter() const override { return caching_allocator().raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    caching_allocator().copy_data(dest, src, count);
  }
};
HbmAsHostAllocator g_hbm_as_host;

// Every kernel argument gets a host view, so building one is the floor of every op's latency: a
// StorageImpl and a TensorImpl to allocate and free. Each thread keeps a few views and re-points
// one whose last user has let go of it (only the pool still holds its TensorImpl, and only that
// TensorImpl its StorageImpl), which leaves nothing of the previous use behind.
class HostViewPool {
 public:
  static constexpr size_t kCapacity = 16;

  at::Tensor acquire() {
    for (auto& view : views_) {
      c10::TensorImpl* impl = view.unsafeGetTensorImpl();
      if (view.use_count() == 1 && view.weak_use_count() == 1 &&
          impl->storage().use_count() == 1) {
        return view;
      }
    }
    at::Tensor fresh = make();
    if (views_.size() < kCapacity) views_.push_back(fresh);
    return fresh;
  }

 private:
  static at::Tensor make() {
    c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                         c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)), nullptr, false);
    return at::Tensor(c10::make_intrusive<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
        caffe2::TypeMeta::Make<float>()));
  }

  std::vector<at::Tensor> views_;
};

}  // namespace

at::Tensor host_view(const at::Tensor& t, bool resizable) {
  if (!t.defined()) return t;
  TORCH_INTERNAL_ASSERT(t.device().type() == c10::DeviceType::PrivateUse1,
                        "host_view expects a neuron tensor, got one on ", t.device());
  thread_local HostViewPool pool;
  at::Tensor view = pool.acquire();
  c10::TensorImpl* impl = view.unsafeGetTensorImpl();
  // A non-owning storage over the same bytes: the neuron tensor keeps the memory alive for as
  // long as the kernel using the view runs.
  const c10::Storage& storage = t.storage();
  c10::StorageImpl* alias = impl->storage().unsafeGetStorageImpl();
  alias->set_data_ptr_noswap(
      c10::DataPtr(storage.mutable_data(), c10::Device(c10::DeviceType::CPU)));
  alias->set_nbytes(storage.nbytes());
  if (resizable) alias->set_allocator(&g_hbm_as_host);  // (a resizable storage needs one)
  alias->set_resizable(resizable);
  impl->set_storage_and_dtype(impl->storage(), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  impl->_set_conj(t.is_conj());
  impl->_set_neg(t.is_neg());
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

void adopt_host_view(const at::Tensor& view, const at::Tensor& original) {
  c10::StorageImpl* view_storage = view.storage().unsafeGetStorageImpl();
  c10::StorageImpl* storage = original.storage().unsafeGetStorageImpl();
  if (view_storage->data() != storage->data() || view_storage->nbytes() != storage->nbytes()) {
    // The CPU code resized the tensor: its new block is HBM (HbmAsHostAllocator); hand it over.
    c10::DataPtr grown = view_storage->set_data_ptr(c10::DataPtr());
    grown.unsafe_set_device(original.device());
    storage->set_nbytes(view_storage->nbytes());
    storage->set_data_ptr_noswap(std::move(grown));
  }
  if (view.sizes() != original.sizes() || view.strides() != original.strides() ||
      view.storage_offset() != original.storage_offset()) {
    original.unsafeGetTensorImpl()->set_sizes_and_strides(view.sizes(), view.strides(),
                                                         view.storage_offset());
  }
}

at::Tensor move_to_hbm(const at::Tensor& t, c10::Device device) {
  if (!t.defined()) return t;
  at::Tensor moved = at::empty_strided(t.sizes(), t.strides(), t.options().device(device));
  if (t.is_non_overlapping_and_dense()) {
    std::memcpy(moved.data_ptr(), t.data_ptr(), t.numel() * t.element_size());
  } else {
    host_view(moved).copy_(t);
  }
  return moved;
}

}  // namespace torch_neuronx
