// The link model file: its reading of the published figures, its errors, and the price of a
// collective a process group reports.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"
#include "runtime/LinkModel.h"

namespace {

using nrtsim::CollectiveTraffic;
using nrtsim::CoreLinks;
using nrtsim::ErrorCode;
using nrtsim::LinkModel;
using nrtsim::testing::error_message;

LinkModel shipped() { return nrtsim::load_link_model(NRTSIM_SHIPPED_LINK_MODEL); }

TEST(LinkModel, ShippedFileHasEveryChipOfThePresetsWithSources) {
  const LinkModel m = shipped();
  for (const auto& preset : nrtsim::all_presets()) {
    EXPECT_EQ(m.chips.count(preset.chip.name), 1u) << preset.chip.name;
  }
  for (const auto& [name, link] : m.links) EXPECT_FALSE(link.source.empty()) << name;
  for (const auto& [name, chip] : m.chips) EXPECT_FALSE(chip.source.empty()) << name;
  // [HW-TRN2]: 1,024 GB/s per chip inside a trn2.48xlarge, both directions: 512 each way.
  EXPECT_DOUBLE_EQ(m.link(m.chip("Trainium2").scale_up).gbytes_per_s, 512);
  // [EC2-NET]: 3.2 Tbps for 16 chips.
  EXPECT_DOUBLE_EQ(m.chip("Trainium2").efa_gbits_per_s_per_chip * 16, 3200);
  // Every link states the fraction of its bandwidth a collective sustains.
  for (const auto& [name, link] : m.links) {
    EXPECT_GT(link.efficiency, 0) << name;
    EXPECT_LE(link.efficiency, 1) << name;
  }
}

TEST(LinkModel, CoresShareTheirChipsLinks) {
  // Trainium2 at LNC=2: four logical cores per chip share its 512 GB/s and 25 GB/s of EFA, at
  // the links' sustained fraction.
  const LinkModel m = shipped();
  const CoreLinks links(m, "Trainium2", 4, 725);
  EXPECT_DOUBLE_EQ(links.link_bytes_per_ns(), 512 * m.link("NeuronLink-v3").efficiency / 4);
  EXPECT_DOUBLE_EQ(links.efa_bytes_per_ns(), 200.0 / 8 * m.link("EFA").efficiency / 4);
}

TEST(LinkModel, CollectivePrices) {
  const LinkModel m = shipped();
  const CoreLinks links(m, "Trainium2", 4, 725);
  const double hop = m.link("NeuronLink-v3").hop_latency_us * 1e3;
  // A group of one costs nothing on the links.
  EXPECT_EQ(links.collective_ns({1 << 20, 0, 0, 2, 1, 1, false}), 0);
  // Four ranks on one chip: through HBM (each byte read and written), a ring's 3 steps per pass.
  const uint64_t moved = 2 * 3 * (1u << 20) / 4;
  EXPECT_DOUBLE_EQ(links.collective_ns({1 << 20, moved, 0, 2, 4, 1, false}),
                   moved / (725.0 / 2) + 2 * 3 * hop);
  // Sixteen ranks on four chips, a 1 MiB buffer: recursive doubling-halving (1 MB <= 1 MiB < 56
  // MB), 1 + log2(4) steps per pass, over the core's share of NeuronLink.
  const uint64_t moved16 = 2 * 15 * (1u << 20) / 16;
  const double link = links.link_bytes_per_ns();
  EXPECT_DOUBLE_EQ(links.collective_ns({1 << 20, moved16, 0, 2, 16, 1, false}),
                   moved16 / link + 2 * 3 * hop);
  // A small buffer takes the mesh: 2 steps per pass.
  EXPECT_DOUBLE_EQ(links.collective_ns({4096, 3840, 0, 2, 16, 1, false}), 3840 / link + 2 * 2 * hop);
  // Above 56 MB a group holding all four cores of each of its chips runs KangaRing: the ranks of
  // a chip pair up, 8 of the 16 on the cycle, 7 steps per pass (a ring would take 15).
  const uint64_t big = 64u << 20;
  const uint64_t moved_big = 2 * 15 * big / 16;
  std::string over;
  EXPECT_DOUBLE_EQ(links.collective_ns({big, moved_big, 0, 2, 16, 1, false}, &over),
                   moved_big / link + 2 * 7 * hop);
  EXPECT_NE(over.find("kangaring"), std::string::npos) << over;
  // Across two hosts the inter-host leg follows over the core's share of EFA.
  const double efa_hop = m.link("EFA").hop_latency_us * 1e3;
  EXPECT_DOUBLE_EQ(links.collective_ns({1 << 20, 0, 1000, 2, 1, 2, false}),
                   1000 / links.efa_bytes_per_ns() + 2 * efa_hop);
  // A message to a rank of the same chip: through HBM, one hop.
  EXPECT_DOUBLE_EQ(links.collective_ns({1000, 1000, 0, 1, 2, 1, true}), 1000 / (725.0 / 2) + hop);
}

TEST(LinkModel, ErrorsNameTheFileLineAndKey) {
  std::string message = error_message(ErrorCode::kConfiguration, [] {
    nrtsim::parse_link_model("[link.L]\ngbytes_per_s = fast\n", "links.ini");
  });
  EXPECT_NE(message.find("links.ini:2"), std::string::npos) << message;
  message = error_message(ErrorCode::kConfiguration, [] {
    nrtsim::parse_link_model(
        "[link.L]\ngbytes_per_s = 1\nhop_latency_us = 1\nefficiency = 1\nsource = s\nbandwith = 2\n",
        "links.ini");
  });
  EXPECT_NE(message.find("unknown key 'bandwith'"), std::string::npos) << message;
  // A sustained fraction above the link's bandwidth (or none) is refused where it is written.
  message = error_message(ErrorCode::kConfiguration, [] {
    nrtsim::parse_link_model("[link.L]\ngbytes_per_s = 1\nhop_latency_us = 1\nefficiency = 1.5\nsource = s\n",
                             "links.ini");
  });
  EXPECT_NE(message.find("links.ini:4"), std::string::npos) << message;
  EXPECT_NE(message.find("(0, 1]"), std::string::npos) << message;
  message = error_message(ErrorCode::kConfiguration, [] {
    nrtsim::parse_link_model("[chip.C]\nscale_up = Nowhere\nscale_out = Nowhere\n"
                             "efa_gbits_per_s_per_chip = 1\nsource = s\n",
                             "links.ini");
  });
  EXPECT_NE(message.find("unknown link 'Nowhere'"), std::string::npos) << message;
  message = error_message(ErrorCode::kConfiguration, [] { shipped().chip("Trainium9"); });
  EXPECT_NE(message.find("Trainium2"), std::string::npos) << message;
}

}  // namespace
