#include "runtime/TensorTiles.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "runtime/EngineModel.h"
#include "runtime/Error.h"

namespace nrtsim {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Cycles of one assignment: `stationary` columns held in the array, `moving` columns streamed.
int64_t matmul_cycles(const TensorTiles& t, int64_t k, int64_t stationary, int64_t moving) {
  const int64_t full = moving / t.moving_columns;
  const int64_t rest = moving % t.moving_columns;
  const int64_t moving_cycles =
      full * t.moving_columns + (rest > 0 ? std::max(rest, t.min_moving_columns) : 0);
  return ceil_div(k, t.partitions) * ceil_div(stationary, t.stationary_columns) * moving_cycles;
}

}  // namespace

uint64_t matmul_tile_flops(const TensorTiles& tiles, int64_t batch, int64_t m, int64_t k,
                           int64_t n) {
  if (batch <= 0 || m <= 0 || k <= 0 || n <= 0) return 0;
  if (tiles.partitions <= 0 || tiles.stationary_columns <= 0 || tiles.moving_columns <= 0) {
    throw Error(ErrorCode::kConfiguration,
                "tensor tile geometry has a zero size (check the tensor_* keys of the engine "
                "model file)");
  }
  const int64_t cycles = std::min(matmul_cycles(tiles, k, m, n), matmul_cycles(tiles, k, n, m));
  return static_cast<uint64_t>(batch * cycles * tiles.partitions * tiles.stationary_columns * 2);
}

const TensorTiles& tensor_tiles_of(const char* chip) {
  static std::mutex mutex;
  static std::map<std::string, TensorTiles>* tiles = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (tiles == nullptr) {
    const std::string path = default_engine_model_path();
    if (path.empty()) {
      throw Error(ErrorCode::kConfiguration,
                  "no engine model file to read tile geometry from: set NRTSIM_ENGINE_MODEL or "
                  "import torch_neuronx (which sets the shipped neuron_cores.ini)");
    }
    auto* read = new std::map<std::string, TensorTiles>();
    for (const auto& [name, spec] : load_engine_model(path)) (*read)[name] = spec.tiles;
    tiles = read;
  }
  const auto it = tiles->find(chip);
  if (it == tiles->end()) {
    throw Error(ErrorCode::kConfiguration, std::string("the engine model file has no [") + chip +
                                               "] section to take tile geometry from");
  }
  return it->second;
}

}  // namespace nrtsim
