// PrivateUse1HooksInterface for neuron: lazy init, generators, pinned memory, pointer lookup and
// storage resizing, as torch.accelerator, Tensor.pin_memory and the RNG machinery expect.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <cstring>

#include "backend/core/CachingAllocator.h"
#include "backend/core/Generator.h"
#include "backend/core/HostAllocator.h"
#include "backend/core/KernelLaunch.h"
#include "backend/core/NeuronRuntime.h"

namespace torch_neuronx {
namespace {

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  // Never throws and never initialises: reads the environment only.
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return nrtsim::Runtime::is_initialized();
  }
  void init() const override { runtime(); }

  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex previous = current_device();
    if (device != previous) set_device(device);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }

  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &host_allocator(); }

  at::Device getDeviceFromPtr(void* data) const override {
    const int device = runtime().device_of(data);
    TORCH_CHECK(device >= 0, "the pointer ", data, " is not in the HBM of any neuron device");
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device < 0 ? device : resolve_device_index(device));
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return new_generator(device < 0 ? device : resolve_device_index(device));
  }

  // Storage.resize_() and Tensor.resize_() growth: a new block, the old bytes copied over.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    TORCH_CHECK(storage.resizable(), "trying to resize a neuron storage that is not resizable");
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    const c10::DeviceGuard guard(storage.device());
    c10::DataPtr fresh = caching_allocator().allocate(new_bytes);
    const size_t keep = impl->data() != nullptr ? std::min(new_bytes, impl->nbytes()) : 0;
    // The old bytes move within HBM in the stream's order, as one launch: later kernels on the
    // stream see the grown storage, earlier ones the old one.
    nrtsim::Work work;
    work[nrtsim::Engine::kDma].bytes_read = keep;
    work[nrtsim::Engine::kDma].bytes_written = keep;
    launch_on(storage.device().index(), "nrtsim::storage_resize", LaunchKind::kResize, work, [&] {
      if (keep > 0) std::memcpy(fresh.get(), impl->data(), keep);
    });
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(new_bytes);
  }
};

[[maybe_unused]] const bool g_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  return true;
}();

}  // namespace
}  // namespace torch_neuronx
