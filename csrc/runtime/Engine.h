// The engines of a NeuronCore that a launch can occupy. Each runs its own instruction stream, so
// work on different engines overlaps and work on one engine serialises.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace nrtsim {

enum class Engine : uint8_t { kTensor, kVector, kScalar, kGpSimd, kDma };
inline constexpr size_t kEngineCount = 5;
inline constexpr std::array<Engine, kEngineCount> kAllEngines{
    Engine::kTensor, Engine::kVector, Engine::kScalar, Engine::kGpSimd, Engine::kDma};

// "tensor", "vector", "scalar", "gpsimd", "dma".
const char* engine_name(Engine engine);

inline constexpr size_t index_of(Engine engine) { return static_cast<size_t>(engine); }

}  // namespace nrtsim
