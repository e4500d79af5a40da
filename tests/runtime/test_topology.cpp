// Topology built from explicit configurations, independent of the process environment.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "runtime/Error.h"
#include "runtime/InstancePreset.h"
#include "runtime/Topology.h"

namespace {

using nrtsim::Error;
using nrtsim::ErrorCode;
using nrtsim::Topology;
using nrtsim::TopologyConfig;

using nrtsim::testing::error_message;
using nrtsim::testing::kGiB;

std::vector<int> logical_ids(const Topology& topo) {
  std::vector<int> ids;
  for (const auto& core : topo.cores()) ids.push_back(core.logical_id);
  return ids;
}

TEST(Topology, DefaultPresetIsTrn2_3xlargeAtLnc2) {
  EXPECT_EQ(nrtsim::kDefaultInstance, "trn2.3xlarge");
  const Topology topo = Topology::build(TopologyConfig{});
  EXPECT_EQ(topo.instance().name, "trn2.3xlarge");
  EXPECT_EQ(topo.instance().chip.name, "Trainium2");
  EXPECT_EQ(topo.instance().physical_cores(), 8);
  EXPECT_EQ(topo.lnc(), 2);
  EXPECT_EQ(topo.logical_cores_on_instance(), 4);
  ASSERT_EQ(topo.device_count(), 4);
  for (int i = 0; i < 4; ++i) {
    const auto& core = topo.core(i);
    EXPECT_EQ(core.device_index, i);
    EXPECT_EQ(core.logical_id, i);
    EXPECT_EQ(core.chip, 0);
    EXPECT_EQ(core.physical_cores, (std::vector<int>{2 * i, 2 * i + 1}));
    EXPECT_EQ(core.hbm_capacity, 24 * kGiB);
  }
  EXPECT_EQ(topo.describe(),
            "trn2.3xlarge (1 x Trainium2, LNC=2, 4 visible logical NeuronCores)");
}

TEST(Topology, Lnc1DoublesTheCoresAndHalvesTheirHbm) {
  TopologyConfig config;
  config.lnc = 1;
  const Topology topo = Topology::build(config);
  EXPECT_EQ(topo.lnc(), 1);
  ASSERT_EQ(topo.device_count(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(topo.core(i).logical_id, i);
    EXPECT_EQ(topo.core(i).physical_cores, (std::vector<int>{i}));
    EXPECT_EQ(topo.core(i).hbm_capacity, 12 * kGiB);
  }
}

TEST(Topology, VisibleCoresRange) {
  TopologyConfig config;
  config.visible_cores = "0-1";
  const Topology topo = Topology::build(config);
  ASSERT_EQ(topo.device_count(), 2);
  EXPECT_EQ(logical_ids(topo), (std::vector<int>{0, 1}));
  EXPECT_EQ(topo.core(1).physical_cores, (std::vector<int>{2, 3}));
}

TEST(Topology, VisibleSingleCoreIsDeviceZero) {
  TopologyConfig config;
  config.visible_cores = "2";
  const Topology topo = Topology::build(config);
  ASSERT_EQ(topo.device_count(), 1);
  EXPECT_EQ(topo.core(0).device_index, 0);
  EXPECT_EQ(topo.core(0).logical_id, 2);
  EXPECT_EQ(topo.core(0).physical_cores, (std::vector<int>{4, 5}));
  EXPECT_EQ(topo.core(0).hbm_capacity, 24 * kGiB);
}

TEST(Topology, VisibleCoresBeyondTheInstanceIsAnError) {
  TopologyConfig config;
  config.visible_cores = "3-4";
  const std::string message =
      error_message(ErrorCode::kConfiguration, [&] { Topology::build(config); });
  EXPECT_NE(message.find("NEURON_RT_VISIBLE_CORES='3-4'"), std::string::npos) << message;
  EXPECT_NE(message.find("names core 4"), std::string::npos) << message;
  EXPECT_NE(message.find("4 logical NeuronCores (0-3)"), std::string::npos) << message;
}

TEST(Topology, MalformedVisibleCoresIsAnError) {
  TopologyConfig config;
  config.visible_cores = "0,0";
  const std::string message =
      error_message(ErrorCode::kConfiguration, [&] { Topology::build(config); });
  EXPECT_NE(message.find("NEURON_RT_VISIBLE_CORES"), std::string::npos) << message;
}

TEST(Topology, NumCoresTakesTheFirstCores) {
  TopologyConfig config;
  config.num_cores = 3;
  const Topology topo = Topology::build(config);
  EXPECT_EQ(logical_ids(topo), (std::vector<int>{0, 1, 2}));
}

TEST(Topology, NumCoresOutOfRangeIsAnError) {
  for (int n : {0, 5}) {
    TopologyConfig config;
    config.num_cores = n;
    const std::string message =
        error_message(ErrorCode::kConfiguration, [&] { Topology::build(config); });
    EXPECT_NE(message.find("NEURON_RT_NUM_CORES=" + std::to_string(n)), std::string::npos)
        << message;
    EXPECT_NE(message.find("between 1 and 4"), std::string::npos) << message;
  }
}

TEST(Topology, VisibleCoresTakePrecedenceOverNumCores) {
  TopologyConfig config;
  config.visible_cores = "1,3";
  config.num_cores = 4;
  const Topology topo = Topology::build(config);
  EXPECT_EQ(logical_ids(topo), (std::vector<int>{1, 3}));
  // A count that would be invalid on its own is ignored too.
  config.num_cores = 99;
  EXPECT_EQ(Topology::build(config).device_count(), 2);
}

TEST(Topology, Trn2_48xlargeHas64LogicalCores) {
  TopologyConfig config;
  config.instance = "trn2.48xlarge";
  const Topology topo = Topology::build(config);
  EXPECT_EQ(topo.instance().chips, 16);
  EXPECT_EQ(topo.lnc(), 2);
  EXPECT_EQ(topo.logical_cores_on_instance(), 64);
  ASSERT_EQ(topo.device_count(), 64);
  // Four logical cores per chip: core 5 sits on chip 1 and fuses physical cores 10 and 11.
  EXPECT_EQ(topo.core(5).chip, 1);
  EXPECT_EQ(topo.core(5).physical_cores, (std::vector<int>{10, 11}));
  EXPECT_EQ(topo.core(63).chip, 15);
  EXPECT_EQ(topo.core(63).physical_cores, (std::vector<int>{126, 127}));
  EXPECT_EQ(topo.core(63).hbm_capacity, 24 * kGiB);
}

TEST(Topology, Lnc1On48xlargeExceedsTheDeviceLimit) {
  // 128 logical cores: index 127 would fit PyTorch's int8 device index, a count of 128 does not.
  EXPECT_EQ(nrtsim::kMaxDevicesPerProcess, 127);
  for (const char* instance : {"trn2.48xlarge", "trn3.48xlarge"}) {
    TopologyConfig config;
    config.instance = instance;
    config.lnc = 1;
    const std::string message =
        error_message(ErrorCode::kConfiguration, [&] { Topology::build(config); });
    EXPECT_NE(message.find("would see 128 logical NeuronCores"), std::string::npos) << message;
    EXPECT_NE(message.find("at most 127"), std::string::npos) << message;
    EXPECT_NE(message.find("NEURON_RT_VISIBLE_CORES"), std::string::npos) << message;
  }
}

TEST(Topology, EveryPresetFitsOrIsRejectedByTheDeviceLimitAlone) {
  // At every valid LNC a preset either gives the process all its logical cores or is refused
  // only for having more than PyTorch can count: never a silently smaller or larger set.
  for (const auto& preset : nrtsim::all_presets()) {
    for (int lnc : preset.chip.valid_lnc) {
      TopologyConfig config;
      config.instance = preset.name;
      config.lnc = lnc;
      const int logical = preset.physical_cores() / lnc;
      if (logical <= nrtsim::kMaxDevicesPerProcess) {
        EXPECT_EQ(Topology::build(config).device_count(), logical) << preset.name << " " << lnc;
      } else {
        EXPECT_EQ(logical, 128) << preset.name;
        const std::string message =
            error_message(ErrorCode::kConfiguration, [&] { Topology::build(config); });
        EXPECT_NE(message.find("at most 127"), std::string::npos) << message;
      }
    }
  }
}

TEST(Topology, Lnc1OnTrn2_48xlargeWithASubsetIsFine) {
  TopologyConfig config;
  config.instance = "trn2.48xlarge";
  config.lnc = 1;
  config.visible_cores = "8-15";
  const Topology topo = Topology::build(config);
  ASSERT_EQ(topo.device_count(), 8);
  EXPECT_EQ(topo.core(0).logical_id, 8);
  EXPECT_EQ(topo.core(0).chip, 1);
  EXPECT_EQ(topo.core(0).physical_cores, (std::vector<int>{8}));
  EXPECT_EQ(topo.core(0).hbm_capacity, 12 * kGiB);

  // The last logical core is usable: as one of at most 127 in this process.
  config.visible_cores = "1-127";
  const Topology upper = Topology::build(config);
  ASSERT_EQ(upper.device_count(), 127);
  EXPECT_EQ(upper.core(126).logical_id, 127);
  EXPECT_EQ(upper.core(126).physical_cores, (std::vector<int>{127}));

  config.visible_cores.reset();
  config.num_cores = 127;
  EXPECT_EQ(Topology::build(config).device_count(), 127);
  config.num_cores = 128;
  error_message(ErrorCode::kConfiguration, [&] { Topology::build(config); });
}

TEST(Topology, InvalidLncIsAnError) {
  for (int lnc : {0, 3, 4}) {
    TopologyConfig config;
    config.lnc = lnc;
    const std::string message =
        error_message(ErrorCode::kConfiguration, [&] { Topology::build(config); });
    EXPECT_NE(message.find("NEURON_LOGICAL_NC_CONFIG=" + std::to_string(lnc)), std::string::npos)
        << message;
    EXPECT_NE(message.find("Trainium2"), std::string::npos) << message;
    EXPECT_NE(message.find("use 1 or 2"), std::string::npos) << message;
  }
  TopologyConfig trn1;
  trn1.instance = "trn1.2xlarge";
  trn1.lnc = 2;
  const std::string message =
      error_message(ErrorCode::kConfiguration, [&] { Topology::build(trn1); });
  EXPECT_NE(message.find("use 1"), std::string::npos) << message;
  EXPECT_EQ(message.find("use 1 or"), std::string::npos) << message;
}

TEST(Topology, UnknownInstanceListsTheKnownOnes) {
  TopologyConfig config;
  config.instance = "trn9.huge";
  const std::string message =
      error_message(ErrorCode::kConfiguration, [&] { Topology::build(config); });
  EXPECT_NE(message.find("NRTSIM_INSTANCE='trn9.huge'"), std::string::npos) << message;
  for (const auto& preset : nrtsim::all_presets()) {
    EXPECT_NE(message.find(preset.name), std::string::npos) << preset.name << ": " << message;
  }
}

TEST(Topology, OtherPresets) {
  TopologyConfig config;
  config.instance = "trn1.2xlarge";
  Topology topo = Topology::build(config);
  EXPECT_EQ(topo.lnc(), 1);
  EXPECT_EQ(topo.device_count(), 2);
  EXPECT_EQ(topo.core(1).hbm_capacity, 16 * kGiB);

  config.instance = "trn3.3xlarge";
  topo = Topology::build(config);
  EXPECT_EQ(topo.device_count(), 4);
  EXPECT_EQ(topo.core(0).hbm_capacity, 36 * kGiB);
}

TEST(Topology, HbmOverrideAppliesToEveryCore) {
  TopologyConfig config;
  config.hbm_bytes = 64ull * 1024 * 1024;
  config.lnc = 1;
  const Topology topo = Topology::build(config);
  ASSERT_EQ(topo.device_count(), 8);
  for (const auto& core : topo.cores()) EXPECT_EQ(core.hbm_capacity, 64ull * 1024 * 1024);
}

TEST(Topology, CoreOutOfRangeNamesTheVisibleRange) {
  const Topology topo = Topology::build(TopologyConfig{});
  std::string message = error_message(ErrorCode::kInvalidDevice, [&] { topo.core(4); });
  // TorchNeuron's sentence first, then the visible devices and what selects them.
  EXPECT_EQ(message.rfind("Device index 4 is out of range. Valid range is 0 to 3 for this process",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find("neuron:4 does not exist among its 4 NeuronCore device(s) "
                         "(neuron:0-neuron:3)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("NEURON_RT_VISIBLE_CORES"), std::string::npos) << message;

  message = error_message(ErrorCode::kInvalidDevice, [&] { topo.core(-1); });
  EXPECT_NE(message.find("Device index -1 is out of range"), std::string::npos) << message;

  TopologyConfig one;
  one.visible_cores = "2";
  const Topology single = Topology::build(one);
  message = error_message(ErrorCode::kInvalidDevice, [&] { single.core(1); });
  EXPECT_NE(message.find("Valid range is 0 to 0 for this process: neuron:1 does not exist among "
                         "its 1 NeuronCore device(s) (neuron:0),"),
            std::string::npos)
      << message;
}

}  // namespace
