#include "backend/core/Generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "backend/core/NeuronRuntime.h"

namespace torch_neuronx {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

NeuronGenerator::NeuronGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void NeuronGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t NeuronGenerator::seed() {
  set_current_seed(c10::detail::getNonDeterministicRandom());
  return seed_;
}

void NeuronGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                  new_state.device().is_cpu() && new_state.numel() == kStateBytes &&
                  new_state.is_contiguous(),
              "neuron RNG state must be a contiguous CPU torch.ByteTensor of ", kStateBytes,
              " bytes (uint64 seed, uint64 offset), as returned by torch.neuron.get_rng_state(); "
              "got ", new_state.dtype().name(), " with ", new_state.numel(), " elements on ",
              new_state.device());
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, 8);
  std::memcpy(&offset_, bytes + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGenerator::get_state() const {
  at::Tensor state = at::empty({static_cast<int64_t>(kStateBytes)}, at::kByte);
  auto* bytes = state.data_ptr<uint8_t>();
  std::memcpy(bytes, &seed_, 8);
  std::memcpy(bytes + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> NeuronGenerator::reserve(uint64_t count) {
  const uint64_t offset = offset_;
  offset_ += (count + 3) / 4 * 4;
  return {seed_, offset};
}

NeuronGenerator* NeuronGenerator::clone_impl() const {
  auto* copy = new NeuronGenerator(device().index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::deque<at::Generator>* generators = new std::deque<at::Generator>();  // stable refs
  if (device < 0) device = current_device();
  check_device_index(device);
  std::lock_guard<std::mutex> lock(mutex);
  while (generators->size() <= static_cast<size_t>(device)) {
    generators->push_back(at::make_generator<NeuronGenerator>(
        static_cast<c10::DeviceIndex>(generators->size())));
  }
  return (*generators)[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return at::make_generator<NeuronGenerator>(device);
}

at::Generator host_generator_for(const std::optional<at::Generator>& generator,
                                 c10::DeviceIndex device, uint64_t count) {
  // Not the current device's generator: kernels registered for PrivateUse1 run without a device
  // guard, and a tensor on neuron:1 must draw from neuron:1's stream whatever device is current.
  at::Generator source =
      generator.has_value() && generator->defined() ? *generator : default_generator(device);
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1,
              "expected a neuron generator for an op on neuron tensors, got a generator on ",
              source.device());
  uint64_t seed, offset;
  {
    std::lock_guard<std::mutex> lock(source.mutex());
    std::tie(seed, offset) = source.get<NeuronGenerator>()->reserve(count);
  }
  return at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed ^ splitmix64(offset)));
}

}  // namespace torch_neuronx
