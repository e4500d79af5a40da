// Guard: a collective costs the same on the simulated clock and in the estimate's projection.
// The clock prices the traffic a process group reports (the verb table's bytes, runtime/transport/
// Verb.h, put on the launch record as ProcessGroupNeuron's link_work does); the projection states
// the same collective of a parallel layout (cost/Collectives.h). Both must reach the one rule of
// the link model (CoreLinks::collective_ns) with the same traffic, byte by byte, and the same
// links, so the prices are equal, not close.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "runtime/EngineModel.h"
#include "runtime/InstancePreset.h"
#include "runtime/IniFile.h"
#include "runtime/LaunchRecord.h"
#include "runtime/LinkModel.h"
#include "runtime/SimClock.h"
#include "runtime/cost/Collectives.h"
#include "runtime/cost/CostData.h"
#include "runtime/cost/RankModel.h"
#include "runtime/transport/Verb.h"

namespace nrtsim::cost {
namespace {

namespace tp = nrtsim::transport;

struct Shipped {
  LinkModel links = load_link_model(NRTSIM_SHIPPED_LINK_MODEL);
  std::map<std::string, CoreSpec> chips = load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL);
  CostData data;
  Shipped() {
    std::string path = NRTSIM_SHIPPED_ENGINE_MODEL;
    path = path.substr(0, path.rfind('/') + 1) + "estimate.ini";
    data = parse_cost_data(read_ini_file(path), "estimate.ini", links);
  }
};
const Shipped& files() {
  static const Shipped s;
  return s;
}

// A process group's report of one call: the verb table's link bytes as the runtime prices them
// (transport::collective_traffic, what ProcessGroupNeuron's link_work puts on the record).
CollectiveTraffic reported(const tp::LinkBytes& b) { return tp::collective_traffic(b); }

// The simulated clock of rank 0's core on `instance` at its default LNC, as the runtime builds it
// (Runtime.cpp: the engine model's core, the link model's chip shared by its logical cores).
SimClock clock_of(const std::string& instance) {
  const InstancePreset& preset = find_preset(instance);
  const CoreModel core(files().chips.at(preset.chip.name), preset.chip.default_lnc);
  return SimClock(core, CoreLinks(files().links, preset.chip.name,
                                  preset.chip.physical_cores / preset.chip.default_lnc,
                                  core.hbm_bytes_per_ns()));
}

double clock_ns(const SimClock& clock, const CollectiveTraffic& traffic) {
  LaunchRecord record;
  record.kind = LaunchKind::kCollective;
  record.work.collective = traffic;
  return clock.busy_ns(record)[index_of(Engine::kDma)];
}

struct Case {
  tp::Verb verb;
  CollectiveKind kind;
};
const Case kCases[] = {
    {tp::Verb::kAllreduce, CollectiveKind::kAllReduce},
    {tp::Verb::kAllgather, CollectiveKind::kAllGather},
    {tp::Verb::kReduceScatter, CollectiveKind::kReduceScatter},
};

TEST(CollectivePrice, ClockAndEstimateAgreeWithinAnInstance) {
  // Every Trainium generation, groups of consecutive ranks from two (one chip, through HBM) to the
  // whole instance, buffers that take each of Neuron's algorithms: mesh, RDH, ring / KangaRing.
  int compared = 0;
  for (const char* name : {"trn1.32xlarge", "trn2.48xlarge", "trn3.48xlarge"}) {
    const InstanceSpec& instance = files().data.instance(name);
    const RankModel rank(instance, files().data, files().chips);
    const SimClock clock = clock_of(name);
    const int per_instance = instance.devices * rank.ranks_per_device();
    for (int n = 2; n <= per_instance; n *= 2) {
      for (const uint64_t part : {uint64_t{1} << 10, uint64_t{1} << 17, uint64_t{1} << 22}) {
        for (const Case& c : kCases) {
          tp::VerbCall call;
          call.verb = c.verb;
          // The verb table's size is one rank's part for an all-gather or reduce-scatter; the
          // projection's is the whole buffer.
          const bool parted = c.verb != tp::Verb::kAllreduce;
          call.bytes = parted ? part : part * n;
          tp::GroupPlace place;
          place.rank = 0;
          place.size = n;
          const CollectiveTraffic from_group = reported(tp::link_bytes(call, place));
          const double bytes = static_cast<double>(part) * n;
          const CollectiveTraffic from_estimate =
              traffic_of(c.kind, bytes, n, 1, instance, rank);
          SCOPED_TRACE(std::string(name) + " " + tp::verb_name(c.verb) + " of " +
                       std::to_string(n) + " ranks, " + std::to_string(part * n) + " bytes");
          EXPECT_EQ(from_estimate.buffer_bytes, from_group.buffer_bytes);
          EXPECT_EQ(from_estimate.link_bytes, from_group.link_bytes);
          EXPECT_EQ(from_estimate.network_bytes, from_group.network_bytes);
          EXPECT_EQ(from_estimate.passes, from_group.passes);
          EXPECT_EQ(from_estimate.ranks, from_group.ranks);
          EXPECT_EQ(from_estimate.hosts, from_group.hosts);
          const double clock_price = clock_ns(clock, from_group);
          EXPECT_GT(clock_price, 0);
          EXPECT_DOUBLE_EQ(
              collective_link_ns(c.kind, bytes, n, 1, instance, files().data, rank), clock_price);
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 100);
}

TEST(CollectivePrice, ClockAndEstimateAgreeAcrossInstances) {
  // An all-reduce over two hosts of a whole instance each: NeuronLink inside, then EFA between
  // them on each rank's share of the buffer.
  const InstanceSpec& instance = files().data.instance("trn2.48xlarge");
  const RankModel rank(instance, files().data, files().chips);
  const SimClock clock = clock_of("trn2.48xlarge");
  const int per_instance = instance.devices * rank.ranks_per_device();
  for (const uint64_t bytes : {uint64_t{1} << 16, uint64_t{1} << 26}) {
    tp::VerbCall call;
    call.verb = tp::Verb::kAllreduce;
    call.bytes = bytes;
    tp::GroupPlace place;
    place.rank = 0;
    place.size = 2 * per_instance;
    for (int r = 0; r < place.size; ++r) place.host_of.push_back(r / per_instance);
    const CollectiveTraffic from_group = reported(tp::link_bytes(call, place));
    ASSERT_EQ(from_group.hosts, 2u);
    const CollectiveTraffic from_estimate = traffic_of(
        CollectiveKind::kAllReduce, static_cast<double>(bytes), place.size, 1, instance, rank);
    EXPECT_EQ(from_estimate.link_bytes, from_group.link_bytes);
    EXPECT_EQ(from_estimate.network_bytes, from_group.network_bytes);
    EXPECT_DOUBLE_EQ(collective_link_ns(CollectiveKind::kAllReduce, static_cast<double>(bytes),
                                        place.size, 1, instance, files().data, rank),
                     clock_ns(clock, from_group));
  }
}

TEST(CollectivePrice, ASendToTheNextCoreAgrees) {
  const InstanceSpec& instance = files().data.instance("trn2.48xlarge");
  const RankModel rank(instance, files().data, files().chips);
  tp::VerbCall call;
  call.verb = tp::Verb::kSend;
  call.bytes = 1 << 20;
  call.root = 1;
  tp::GroupPlace place;
  place.rank = 0;
  place.size = 2;
  EXPECT_DOUBLE_EQ(collective_link_ns(CollectiveKind::kSend, 1 << 20, 2, 1, instance, files().data,
                                      rank),
                   clock_ns(clock_of("trn2.48xlarge"), reported(tp::link_bytes(call, place))));
}

TEST(CollectivePrice, AProjectedCollectiveAddsOnlyItsDependentStep) {
  // Inside a projected program the collective also pays the step that triggers it and waits for
  // it (estimate.ini op_latency_us); on the clock, the launch's fixed cost does.
  const InstanceSpec& instance = files().data.instance("trn2.48xlarge");
  const RankModel rank(instance, files().data, files().chips);
  const double link = collective_link_ns(CollectiveKind::kAllReduce, 1e6, 64, 1, instance,
                                         files().data, rank);
  EXPECT_DOUBLE_EQ(
      collective_ns(CollectiveKind::kAllReduce, 1e6, 64, 1, instance, files().data, rank),
      link + files().data.trainium.op_latency_us * 1e3);
}

}  // namespace
}  // namespace nrtsim::cost
