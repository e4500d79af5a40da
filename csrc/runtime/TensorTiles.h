// The tile geometry of a NeuronCore generation: how the Tensor engine's systolic array, SBUF and
// PSUM cut work into tiles. Defined once, in the hardware data file (neuron_cores.ini, keys
// tensor_* / sbuf_* / psum_*, read with the engine model), and asked by everything that counts
// tiles: the op-work table's tile model (backend/core/OpWork.h), the NKI interpreter's limits and
// timeline, the estimate. Torch-free.
//
// Accessors: CoreSpec::tiles (EngineModel.h) for a chip of the data file; CoreModel::tiles() for
// a running core; tensor_tiles_of(chip) below for a chip of the process's data file without a
// runtime; from Python, torch_neuronx._clock.core_model()["tiles"].
#pragma once

#include <cstdint>

namespace nrtsim {

struct TensorTiles {
  // nc_matmul(stationary[K, M], moving[K, N]): K on the partitions, M stationary columns held in
  // the PE array, N moving columns streamed per instruction.
  int64_t partitions = 0;          // K <= 128: rows of the PE array, partitions of SBUF and PSUM
  int64_t stationary_columns = 0;  // M <= 128: PE columns
  int64_t moving_columns = 0;      // N <= 512 (one PSUM bank of FP32, v2/v3) or 4096 (v4)
  // The MM initiation interval: a moving tile narrower than this many columns still costs this
  // many cycles (max(N, 64)).
  int64_t min_moving_columns = 0;
  int64_t sbuf_partition_bytes = 0;  // SBUF bytes per partition
  int64_t psum_bank_bytes = 0;       // PSUM bytes per partition and bank
  int64_t psum_banks = 0;            // PSUM banks per partition
};

// Tensor-engine FLOPs that left [batch, M, K] x right [batch, K, N] occupies: whole tiles of
// `partitions` contraction rows x `stationary_columns` x up to `moving_columns` (a moving tile
// narrower than `min_moving_columns` costing that many cycles), with the cheaper of the two
// operand-to-role assignments; a cycle of the full array is partitions x stationary_columns
// multiply-adds (2 FLOPs each). 0 for an empty product.
uint64_t matmul_tile_flops(const TensorTiles& tiles, int64_t batch, int64_t m, int64_t k, int64_t n);

// The tiles of `chip` ("Trainium2") in the process's engine model file
// (default_engine_model_path(), EngineModel.h), read once. Throws Error(kConfiguration) when the
// file cannot be read or has no such chip.
const TensorTiles& tensor_tiles_of(const char* chip);

}  // namespace nrtsim
