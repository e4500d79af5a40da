// The neuron random number generator. Its state is 16 bytes, (uint64 seed, uint64 offset), like
// CUDA's Philox generator: DTensor's RNG tracker reads and rewrites exactly that layout.
//
// Random kernels draw from a counter-based stream: a kernel that needs N values reserves them,
// which advances the offset by N rounded up to 4, and the values depend only on (seed, offset).
// Re-seeding or restoring a saved state therefore reproduces the same numbers.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <optional>
#include <utility>

namespace torch_neuronx {

class NeuronGenerator final : public c10::GeneratorImpl {
 public:
  static constexpr size_t kStateBytes = 16;

  explicit NeuronGenerator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;  // a fresh non-deterministic seed
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // Reserves `count` values; returns the (seed, offset) they are drawn from. Callers hold mutex_.
  std::pair<uint64_t, uint64_t> reserve(uint64_t count);

 private:
  NeuronGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

// A CPU generator that produces the values reserved from `generator` (or, when it is empty, the
// default generator of `device`, the device the op's tensors are on; -1: the current device): how
// kernels computed with ATen's CPU math on device buffers, and CPU-fallback ops, draw from the
// neuron stream.
at::Generator host_generator_for(const std::optional<at::Generator>& generator,
                                 c10::DeviceIndex device, uint64_t count);

}  // namespace torch_neuronx
