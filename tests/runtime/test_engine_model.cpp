// The engine model file: parsing, its errors, and the rates it implies.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"
#include "runtime/EngineModel.h"

namespace {

using nrtsim::CoreModel;
using nrtsim::Engine;
using nrtsim::ErrorCode;
using nrtsim::LaunchKind;
using nrtsim::Precision;
using nrtsim::Work;
using nrtsim::testing::error_message;

TEST(EngineModel, ShippedFileHasEveryChipOfThePresets) {
  const auto chips = nrtsim::load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL);
  for (const auto& preset : nrtsim::all_presets()) {
    EXPECT_EQ(chips.count(preset.chip.name), 1u) << preset.chip.name;
  }
  EXPECT_EQ(chips.at("Trainium2").neuroncore, "v3");
}

TEST(EngineModel, Trainium2RatesFollowThePublishedFigures) {
  const auto chips = nrtsim::load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL);
  const CoreModel one(chips.at("Trainium2"), 1);
  // 128 x 128 PEs x 2 FLOPs x 2.4 GHz = 78.6 TFLOP/s BF16 per physical core.
  EXPECT_NEAR(one.tensor_flops_per_ns(Precision::kBf16), 78643.2, 1e-6);
  EXPECT_NEAR(one.tensor_flops_per_ns(Precision::kFp8), 2 * 78643.2, 1e-6);
  EXPECT_NEAR(one.tensor_flops_per_ns(Precision::kFp32), 78643.2 / 4, 1e-6);
  EXPECT_NEAR(one.elements_per_ns(Engine::kVector, Precision::kBf16), 512 * 0.96, 1e-9);
  EXPECT_NEAR(one.elements_per_ns(Engine::kVector, Precision::kFp32), 256 * 0.96, 1e-9);
  EXPECT_NEAR(one.hbm_bytes_per_ns(), 362.5, 1e-9);
  // A logical core of two physical cores has twice the rates.
  const CoreModel two(chips.at("Trainium2"), 2);
  EXPECT_NEAR(two.tensor_flops_per_ns(Precision::kBf16), 2 * 78643.2, 1e-6);
  EXPECT_NEAR(two.hbm_bytes_per_ns(), 725, 1e-9);
}

TEST(EngineModel, LargeGemmIsComputeBoundSmallAddIsLaunchBound) {
  const auto chips = nrtsim::load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL);
  const CoreModel core(chips.at("Trainium2"), 2);
  Work gemm;
  const uint64_t n = 8192;
  gemm[Engine::kTensor] = {2 * n * n * n, 2 * n * n * 2, n * n * 2};
  gemm.precision = Precision::kBf16;
  const auto busy = core.busy_ns(gemm, LaunchKind::kKernel);
  const double roofline = std::max(2.0 * n * n * n / core.tensor_flops_per_ns(Precision::kBf16),
                                   3.0 * n * n * 2 / core.hbm_bytes_per_ns());
  EXPECT_DOUBLE_EQ(core.duration_ns(busy, LaunchKind::kKernel),
                   core.fixed_cost_ns(LaunchKind::kKernel) + roofline);
  Work add;
  add[Engine::kVector] = {16, 128, 64};
  const double add_ns = core.duration_ns(core.busy_ns(add, LaunchKind::kKernel), LaunchKind::kKernel);
  EXPECT_LT(add_ns, 1.01 * core.fixed_cost_ns(LaunchKind::kKernel));
}

TEST(EngineModel, HostCopiesUseTheHostLink) {
  const auto chips = nrtsim::load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL);
  const CoreModel core(chips.at("Trainium2"), 2);
  Work copy;
  copy[Engine::kDma] = {0, 1 << 20, 1 << 20};
  const auto h2d = core.busy_ns(copy, LaunchKind::kCopyHostToDevice);
  EXPECT_DOUBLE_EQ(h2d[nrtsim::index_of(Engine::kDma)], (1 << 20) / core.host_link_bytes_per_ns());
  const auto d2d = core.busy_ns(copy, LaunchKind::kCopyDeviceToDevice);
  EXPECT_DOUBLE_EQ(d2d[nrtsim::index_of(Engine::kDma)], 2.0 * (1 << 20) / core.hbm_bytes_per_ns());
}

TEST(EngineModel, ErrorsNameTheFileLineAndKey) {
  std::string message = error_message(ErrorCode::kConfiguration, [] {
    nrtsim::parse_engine_model("[Chip]\ntensor_clock_ghz = fast\n", "model.ini");
  });
  EXPECT_NE(message.find("model.ini:2"), std::string::npos) << message;
  EXPECT_NE(message.find("tensor_clock_ghz"), std::string::npos) << message;
  message = error_message(ErrorCode::kConfiguration, [] {
    nrtsim::parse_engine_model("[Chip]\nwarp_drive = 1\n", "model.ini");
  });
  EXPECT_NE(message.find("unknown key 'warp_drive'"), std::string::npos) << message;
  message = error_message(ErrorCode::kConfiguration, [] {
    nrtsim::parse_engine_model("[Chip]\ntensor_clock_ghz = 1\n", "model.ini");
  });
  EXPECT_NE(message.find("has no 'tensor_macs_per_cycle'"), std::string::npos) << message;
  message = error_message(ErrorCode::kConfiguration,
                          [] { nrtsim::load_engine_model("/nonexistent/model.ini"); });
  EXPECT_NE(message.find("cannot be read"), std::string::npos) << message;
}

}  // namespace
