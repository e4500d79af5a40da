#include "backend/core/HostView.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <cstring>

#include "backend/core/CachingAllocator.h"
#include "backend/core/NeuronRuntime.h"

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

// The neuron device whose HBM this thread's CPU allocations go to (-1: ordinary host memory).
thread_local c10::DeviceIndex t_hbm_device = -1;

// PyTorch's CPU allocator, wrapped: inside a HostAllocationsInHbm scope the CPU code of a kernel
// allocates its results (and scratch) in HBM of the kernel's device, so a fresh result becomes a
// neuron tensor without a copy (move_to_hbm). Everywhere else it is PyTorch's allocator.
class CpuAllocatorWithHbmScope final : public c10::Allocator {
 public:
  explicit CpuAllocatorWithHbmScope(c10::Allocator* host) : host_(host) {}

  c10::DataPtr allocate(size_t nbytes) override {
    if (t_hbm_device < 0 || nbytes == 0) return host_->allocate(nbytes);
    const CurrentDeviceScope scope(t_hbm_device);
    return g_hbm_as_host.allocate(nbytes);
  }
  // raw_allocate() / raw_deallocate() pair through this: route each pointer to its owner.
  c10::DeleterFnPtr raw_deleter() const override { return &free_either; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    host_->copy_data(dest, src, count);
  }

  static void free_either(void* ptr);

  c10::Allocator* host_;
};

CpuAllocatorWithHbmScope* cpu_allocator_with_hbm_scope() {
  // Installed once, over whatever CPU allocator PyTorch had; never destroyed (CPU tensors are
  // freed during exit).
  static auto* allocator = [] {
    auto* a = new CpuAllocatorWithHbmScope(c10::GetCPUAllocator());
    c10::SetCPUAllocator(a, /*priority=*/1);
    return a;
  }();
  return allocator;
}

void CpuAllocatorWithHbmScope::free_either(void* ptr) {
  if (is_caching_allocator_block(ptr)) {
    caching_allocator().raw_deleter()(ptr);
  } else {
    cpu_allocator_with_hbm_scope()->host_->raw_deleter()(ptr);
  }
}

// Every kernel argument gets a host view, so building one is the floor of every op's latency: a
// StorageImpl and a TensorImpl to allocate and free. Each thread keeps a few views and re-points
// one whose last user has let go of it (only the pool still holds its TensorImpl, and only that
// TensorImpl its StorageImpl), which leaves nothing of the previous use behind.
//
// The pool also knows which views are in use, and so which neuron storages this thread's CPU
// code is looking at: a view of a storage already in view shares that view's host storage (see
// host_view).
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
    at::Tensor fresh = empty_host_view();
    if (views_.size() < kCapacity) {
      views_.push_back(fresh);
    } else {
      overflow_.emplace_back(fresh.storage().getWeakStorageImpl());
    }
    return fresh;
  }

  // The host storage of a view in use over the `nbytes` at `data`, if there is one.
  c10::intrusive_ptr<c10::StorageImpl> storage_in_view(const void* data, size_t nbytes) {
    for (auto& view : views_) {
      if (view.use_count() == 1) continue;  // only the pool holds it: not in use
      const c10::Storage& storage = view.unsafeGetTensorImpl()->storage();
      if (storage.data() == data && storage.nbytes() == nbytes) {
        return c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage.unsafeGetStorageImpl());
      }
    }
    std::erase_if(overflow_, [](const auto& weak) { return weak.expired(); });
    for (auto& weak : overflow_) {
      auto storage = weak.lock();
      if (storage && storage->data() == data && storage->nbytes() == nbytes) return storage;
    }
    return {};
  }

  // A view over `storage`, for a second neuron tensor of a storage already in view. Not kept:
  // the pool's views each own their storage alone once let go.
  static at::Tensor sharing(c10::intrusive_ptr<c10::StorageImpl> storage) {
    return at::Tensor(c10::make_intrusive<c10::TensorImpl>(
        c10::Storage(std::move(storage)), c10::DispatchKeySet(c10::DispatchKey::CPU),
        caffe2::TypeMeta::Make<float>()));
  }

 private:
  std::vector<at::Tensor> views_;
  // Views made while every kept one was in use (more than kCapacity at once): watched, not kept.
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> overflow_;
};

// A tensor with dispatch key `key` over `storage`, with the dtype, sizes, strides, offset and
// conjugate/negative bits of `like`.
at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                          c10::DispatchKeySet(key), like.dtype());
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  impl->_set_conj(like.is_conj());
  impl->_set_neg(like.is_neg());
  return t;
}

// The HBM block of a host storage, taken over by a neuron storage of `device` (the host storage
// is left empty): no copy.
c10::Storage take_hbm_block(c10::StorageImpl& host, c10::Device device) {
  const size_t nbytes = host.nbytes();
  c10::DataPtr block = host.set_data_ptr(c10::DataPtr());
  block.unsafe_set_device(device);
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, std::move(block),
                      &caching_allocator(), /*resizable=*/true);
}

// A copy of a whole storage, allocated by `allocator` (the caching allocator for a neuron one).
c10::Storage copy_storage(const c10::StorageImpl& source, c10::Allocator* allocator) {
  const size_t nbytes = source.nbytes();
  c10::Storage copy(c10::Storage::use_byte_size_t(), nbytes, allocator->allocate(nbytes),
                    allocator, /*resizable=*/true);
  if (nbytes > 0) std::memcpy(copy.mutable_data(), source.data(), nbytes);
  return copy;
}

}  // namespace

at::Tensor empty_host_view() {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)), nullptr,
                       /*resizable=*/false);
  return at::Tensor(c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
      caffe2::TypeMeta::Make<float>()));
}

namespace {
// `t`'s dtype, sizes, strides, offset and conjugate/negative bits on `impl`, whose storage
// already lies over `t`'s bytes.
void take_geometry(c10::TensorImpl* impl, const at::Tensor& t) {
  impl->set_storage_and_dtype(impl->storage(), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  impl->_set_conj(t.is_conj());
  impl->_set_neg(t.is_neg());
}
}  // namespace

void point_at(const at::Tensor& view, const at::Tensor& t) {
  c10::TensorImpl* impl = view.unsafeGetTensorImpl();
  const c10::Storage& storage = t.storage();
  c10::StorageImpl* alias = impl->storage().unsafeGetStorageImpl();
  alias->set_data_ptr_noswap(
      c10::DataPtr(storage.mutable_data(), c10::Device(c10::DeviceType::CPU)));
  alias->set_nbytes(storage.nbytes());
  take_geometry(impl, t);
}

at::Tensor host_view(const at::Tensor& t, bool resizable) {
  if (!t.defined()) return t;
  TORCH_INTERNAL_ASSERT(t.device().type() == c10::DeviceType::PrivateUse1,
                        "host_view expects a neuron tensor, got one on ", t.device());
  thread_local HostViewPool pool;
  const c10::Storage& storage = t.storage();
  at::Tensor view;
  if (storage.data() != nullptr) {
    if (auto shared = pool.storage_in_view(storage.data(), storage.nbytes())) {
      view = HostViewPool::sharing(std::move(shared));
    }
  }
  c10::StorageImpl* alias;
  if (view.defined()) {
    // A second view of a storage in view: the same host storage, so the CPU code sees the alias.
    alias = view.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
    take_geometry(view.unsafeGetTensorImpl(), t);
  } else {
    view = pool.acquire();
    alias = view.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
    alias->set_resizable(false);
    point_at(view, t);
  }
  if (resizable) {
    alias->set_allocator(&g_hbm_as_host);  // (a resizable storage needs one)
    alias->set_resizable(true);
  }
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

at::Tensor CallHostViews::view(const at::Tensor& t, bool resizable) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
  for (const auto& e : entries_) {
    if (e.original.is_same(t)) return e.view;
  }
  entries_.push_back({t, host_view(t, resizable), resizable});
  return entries_.back().view;
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
    // The view, and any view sharing its storage, goes on looking at the block without owning
    // it (adopting a second view of that storage is then a no-op).
    view_storage->set_data_ptr_noswap(
        c10::DataPtr(storage->mutable_data(), c10::Device(c10::DeviceType::CPU)));
  }
  if (view.sizes() != original.sizes() || view.strides() != original.strides() ||
      view.storage_offset() != original.storage_offset()) {
    original.unsafeGetTensorImpl()->set_sizes_and_strides(view.sizes(), view.strides(),
                                                         view.storage_offset());
  }
}

HostAllocationsInHbm::HostAllocationsInHbm(c10::DeviceIndex device) : previous_(t_hbm_device) {
  cpu_allocator_with_hbm_scope();
  t_hbm_device = device;
}

HostAllocationsInHbm::~HostAllocationsInHbm() { t_hbm_device = previous_; }

bool owns_hbm_block(const c10::StorageImpl& host_storage) {
  return host_storage.data_ptr().get_deleter() == caching_allocator().raw_deleter();
}

at::Tensor move_to_hbm(const at::Tensor& t, c10::Device device) {
  if (!t.defined()) return t;
  c10::StorageImpl& host_storage = *t.storage().unsafeGetStorageImpl();
  if (t.storage().use_count() == 1 && owns_hbm_block(host_storage)) {
    // Already in HBM, and this tensor alone holds the block: hand it over, no copy.
    return tensor_over(take_hbm_block(host_storage, device), c10::DispatchKey::PrivateUse1, t);
  }
  at::Tensor moved = at::empty_strided(t.sizes(), t.strides(), t.options().device(device));
  if (t.is_non_overlapping_and_dense()) {
    std::memcpy(moved.data_ptr(), t.data_ptr(), t.numel() * t.element_size());
  } else {
    host_view(moved).copy_(t);
  }
  return moved;
}

HostResults::HostResults(c10::Device device,
                         std::vector<std::pair<const void*, c10::Storage>> inputs)
    : device_(device), inputs_(std::move(inputs)) {
  std::sort(inputs_.begin(), inputs_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
}

bool HostResults::aliases_input(const at::Tensor& host) const {
  return input_storage(host.storage().data()) != nullptr;
}

void HostResults::count_user(const at::Tensor& host) {
  users_[host.storage().unsafeGetStorageImpl()].insert(host.unsafeGetTensorImpl());
}

at::Tensor HostResults::to_neuron(const at::Tensor& t) {
  c10::StorageImpl* host = t.storage().unsafeGetStorageImpl();
  if (const c10::Storage* aliased = input_storage(host->data())) {
    return tensor_over(*aliased, c10::DispatchKey::PrivateUse1, t);
  }
  auto done = adopted_.find(host);
  if (done == adopted_.end()) {
    // Only the results hold this HBM block: take it; otherwise copy the storage whole.
    const bool free_to_take =
        owns_hbm_block(*host) && t.storage().use_count() == users_[host].size();
    c10::Storage storage = free_to_take ? take_hbm_block(*host, device_)
                                        : copy_storage(*host, &caching_allocator());
    done = adopted_.emplace(host, std::move(storage)).first;
  }
  return tensor_over(done->second, c10::DispatchKey::PrivateUse1, t);
}

at::Tensor HostResults::to_cpu(const at::Tensor& t) {
  c10::StorageImpl* host = t.storage().unsafeGetStorageImpl();
  if (!owns_hbm_block(*host) || input_storage(host->data()) != nullptr) return t;
  auto done = host_copies_.find(host);
  if (done == host_copies_.end()) {
    done = host_copies_.emplace(host, copy_storage(*host, c10::GetCPUAllocator())).first;
  }
  return tensor_over(done->second, c10::DispatchKey::CPU, t);
}

const c10::Storage* HostResults::input_storage(const void* data) const {
  if (data == nullptr) return nullptr;
  auto it = std::lower_bound(inputs_.begin(), inputs_.end(), data,
                             [](const auto& entry, const void* d) { return entry.first < d; });
  return it != inputs_.end() && it->first == data ? &it->second : nullptr;
}

}  // namespace torch_neuronx
