// The tile geometry of the engine model file and the tile occupancy of a matmul.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"
#include "runtime/EngineModel.h"
#include "runtime/TensorTiles.h"

namespace {

using nrtsim::ErrorCode;
using nrtsim::TensorTiles;
using nrtsim::matmul_tile_flops;
using nrtsim::testing::error_message;

TensorTiles trainium2() {
  return nrtsim::load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL).at("Trainium2").tiles;
}

TEST(TensorTiles, ShippedGeometryFollowsTheNkiGuides) {
  const auto chips = nrtsim::load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL);
  for (const char* chip : {"Trainium1", "Trainium2", "Trainium3"}) {
    const TensorTiles& t = chips.at(chip).tiles;
    EXPECT_EQ(t.partitions, 128) << chip;
    EXPECT_EQ(t.stationary_columns, 128) << chip;
    EXPECT_EQ(t.min_moving_columns, 64) << chip;
    EXPECT_EQ(t.psum_bank_bytes, 2048) << chip;
    EXPECT_EQ(t.psum_banks, 8) << chip;
  }
  // One PSUM bank of FP32 on v2/v3; the whole PSUM on v4.
  EXPECT_EQ(chips.at("Trainium2").tiles.moving_columns, 512);
  EXPECT_EQ(chips.at("Trainium3").tiles.moving_columns, 4096);
  EXPECT_EQ(chips.at("Trainium2").tiles.sbuf_partition_bytes, 224 * 1024);
}

TEST(TensorTiles, FullTilesCostTheirFlops) {
  const TensorTiles t = trainium2();
  const uint64_t tile = 2ull * 128 * 128;  // FLOPs of one cycle of the full array
  EXPECT_EQ(matmul_tile_flops(t, 1, 128, 128, 512), 2ull * 128 * 128 * 512);
  // Batch-1 decode: a 1-column moving tile pays the 64-cycle initiation interval.
  EXPECT_EQ(matmul_tile_flops(t, 1, 1, 4096, 4096), (4096 / 128) * (4096 / 128) * 64 * tile);
  // A 100 x 100 stationary tile still occupies the whole array.
  EXPECT_EQ(matmul_tile_flops(t, 1, 100, 100, 512), 400 * tile);
  EXPECT_EQ(matmul_tile_flops(t, 3, 100, 100, 512), 3 * 400 * tile);
  EXPECT_EQ(matmul_tile_flops(t, 0, 100, 100, 512), 0u);
}

TEST(TensorTiles, WiderMovingTilesPadLess) {
  auto chips = nrtsim::load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL);
  const uint64_t tile = 2ull * 128 * 128;
  // 520 moving columns: 512 + a 64-cycle remainder on v3, one 520-column tile on v4.
  EXPECT_EQ(matmul_tile_flops(chips.at("Trainium2").tiles, 1, 128, 128, 520), (512 + 64) * tile);
  EXPECT_EQ(matmul_tile_flops(chips.at("Trainium3").tiles, 1, 128, 128, 520), 520 * tile);
}

TEST(TensorTiles, BadGeometryIsAnError) {
  std::string message = error_message(ErrorCode::kConfiguration, [] {
    nrtsim::parse_engine_model("[Chip]\ntensor_partitions = 12.5\n", "model.ini");
  });
  EXPECT_NE(message.find("model.ini:2"), std::string::npos) << message;
  EXPECT_NE(message.find("whole positive number"), std::string::npos) << message;
  message = error_message(ErrorCode::kConfiguration, [] {
    matmul_tile_flops(TensorTiles{}, 1, 1, 1, 1);
  });
  EXPECT_NE(message.find("zero size"), std::string::npos) << message;
}

}  // namespace
