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
    {tp::Verb::kAlltoall, CollectiveKind::kAllToAll},
};

// The process group's report of rank 0's call in a group of `hosts` x `per_host` consecutive
// ranks, each holding `part` bytes for every member (an all-reduce's buffer is the whole).
CollectiveTraffic group_report(tp::Verb verb, uint64_t part, int per_host, int hosts) {
  const int n = per_host * hosts;
  tp::VerbCall call;
  call.verb = verb;
  // The verb table's size is one rank's part for an all-gather or reduce-scatter, the whole
  // buffer for an all-reduce; an all-to-all's, the piece for each member.
  call.bytes = verb == tp::Verb::kAllreduce ? part * n : part;
  if (verb == tp::Verb::kAlltoall) {
    call.send_to.assign(n, part);
    call.recv_from.assign(n, part);
  }
  tp::GroupPlace place;
  place.rank = 0;
  place.size = n;
  if (hosts > 1) {
    for (int r = 0; r < n; ++r) place.host_of.push_back(r / per_host);
  }
  return reported(tp::link_bytes(call, place));
}

// Rank 0's collective of `hosts` x `per_host` ranks on `instance`, reported by a process group
// and stated by the estimate (a group of consecutive ranks when it fills whole instances, else
// strided so that `per_host` of its members sit on each instance): the same traffic, byte by
// byte, and the same price on the clock and in the projection.
void expect_agreement(const char* name, const Case& c, uint64_t part, int per_host, int hosts) {
  const InstanceSpec& instance = files().data.instance(name);
  const RankModel rank(instance, files().data, files().chips);
  const int per_instance = instance.devices * rank.ranks_per_device();
  const int n = per_host * hosts;
  const int stride = hosts > 1 ? per_instance / per_host : 1;
  const double bytes = static_cast<double>(part) * n;
  SCOPED_TRACE(std::string(name) + " " + tp::verb_name(c.verb) + " of " + std::to_string(hosts) +
               " x " + std::to_string(per_host) + " ranks, " + std::to_string(part * n) + " bytes");
  const CollectiveTraffic from_group = group_report(c.verb, part, per_host, hosts);
  const CollectiveTraffic from_estimate = traffic_of(c.kind, bytes, n, stride, instance, rank);
  EXPECT_EQ(from_estimate.buffer_bytes, from_group.buffer_bytes);
  EXPECT_EQ(from_estimate.link_bytes, from_group.link_bytes);
  EXPECT_EQ(from_estimate.network_bytes, from_group.network_bytes);
  EXPECT_EQ(from_estimate.passes, from_group.passes);
  EXPECT_EQ(from_estimate.ranks, from_group.ranks);
  EXPECT_EQ(from_estimate.hosts, from_group.hosts);
  EXPECT_EQ(from_estimate.all_to_all, from_group.all_to_all);
  const double clock_price = clock_ns(clock_of(name), from_group);
  EXPECT_GT(clock_price, 0);
  EXPECT_DOUBLE_EQ(collective_link_ns(c.kind, bytes, n, stride, instance, files().data, rank),
                   clock_price);
}

TEST(CollectivePrice, ClockAndEstimateAgreeWithinAnInstance) {
  // Every Trainium generation, groups of consecutive ranks from two (one chip, through HBM) to the
  // whole instance, buffers that take each of Neuron's algorithms: mesh, RDH, ring / KangaRing.
  int compared = 0;
  for (const char* name : {"trn1.32xlarge", "trn2.48xlarge", "trn3.48xlarge"}) {
    const InstanceSpec& instance = files().data.instance(name);
    const RankModel rank(instance, files().data, files().chips);
    const int per_instance = instance.devices * rank.ranks_per_device();
    for (int n = 2; n <= per_instance; n *= 2) {
      for (const uint64_t part : {uint64_t{1} << 10, uint64_t{1} << 17, uint64_t{1} << 22}) {
        for (const Case& c : kCases) {
          expect_agreement(name, c, part, n, 1);
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 100);
}

TEST(CollectivePrice, ClockAndEstimateAgreeAcrossInstances) {
  // Groups of whole instances, 2 to 5 of them: NeuronLink inside each, EFA between them on each
  // rank's shard, every collective that runs hierarchically (and the all-to-all, flat).
  int compared = 0;
  for (const char* name : {"trn1.32xlarge", "trn2.48xlarge", "trn3.48xlarge"}) {
    const InstanceSpec& instance = files().data.instance(name);
    const RankModel rank(instance, files().data, files().chips);
    const int per_instance = instance.devices * rank.ranks_per_device();
    for (int hosts = 2; hosts <= 5; ++hosts) {
      for (const uint64_t part : {uint64_t{1} << 10, uint64_t{1} << 16, uint64_t{1} << 20}) {
        for (const Case& c : kCases) {
          expect_agreement(name, c, part, per_instance, hosts);
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 3 * 4 * 3 * 4);
}

TEST(CollectivePrice, AStridedGroupOfAFewRanksPerInstanceAgreesOnItsBytes) {
  // Two to four ranks on each of two or three instances (the estimate's strided groups, the
  // simulated hosts of tests/distributed): the same bytes and EFA leg. (The prices differ in
  // where the members sit: the estimate's are on separate chips, a process group's on
  // consecutive cores; tests/distributed/test_collective_price.py compares the prices where the
  // algorithm's steps do not depend on it.)
  const InstanceSpec& instance = files().data.instance("trn1.32xlarge");
  const RankModel rank(instance, files().data, files().chips);
  const int per_instance = instance.devices * rank.ranks_per_device();
  for (int hosts = 2; hosts <= 3; ++hosts) {
    for (int per_host = 2; per_host <= 4; ++per_host) {
      for (const Case& c : kCases) {
        const uint64_t part = 3 << 12;
        const int n = hosts * per_host;
        SCOPED_TRACE(std::string(tp::verb_name(c.verb)) + " of " + std::to_string(hosts) + " x " +
                     std::to_string(per_host));
        const CollectiveTraffic from_group = group_report(c.verb, part, per_host, hosts);
        const CollectiveTraffic from_estimate =
            traffic_of(c.kind, static_cast<double>(part) * n, n, per_instance / per_host,
                       instance, rank);
        EXPECT_EQ(from_estimate.ranks, from_group.ranks);
        EXPECT_EQ(from_estimate.hosts, from_group.hosts);
        EXPECT_EQ(from_estimate.link_bytes, from_group.link_bytes);
        EXPECT_EQ(from_estimate.network_bytes, from_group.network_bytes);
      }
    }
  }
}

TEST(CollectivePrice, AnAllGatherAcrossHostsBringsEveryPartOnce) {
  // Independent of either path's statement: after an all-gather a rank holds all N parts; it
  // started with one, its rail brought it its share of the other hosts' parts (EFA), and the rest
  // came over NeuronLink from its host's other ranks, the other hosts' parts included. A
  // reduce-scatter is the mirror image (what a rank sends). trn2.48xlarge, 2 hosts x 64 ranks,
  // 1 MiB parts: 126 MiB over NeuronLink, 1 MiB over EFA (the verb table once counted 63 MiB,
  // the host's own parts alone).
  const uint64_t mib = 1 << 20;
  for (const tp::Verb verb : {tp::Verb::kAllgather, tp::Verb::kReduceScatter}) {
    const CollectiveTraffic t = group_report(verb, mib, 64, 2);
    EXPECT_EQ(t.link_bytes, 126 * mib);
    EXPECT_EQ(t.network_bytes, 1 * mib);
  }
  for (int hosts = 1; hosts <= 8; ++hosts) {
    for (int per_host = 1; per_host <= 64; per_host *= 4) {
      if (hosts * per_host < 2) continue;
      const uint64_t part = 4096;
      const CollectiveTraffic t = group_report(tp::Verb::kAllgather, part, per_host, hosts);
      EXPECT_EQ(part + t.network_bytes + t.link_bytes, part * hosts * per_host)
          << hosts << " hosts x " << per_host;
      // An all-reduce is a reduce-scatter and an all-gather: twice the bytes of each.
      const CollectiveTraffic ar = group_report(tp::Verb::kAllreduce, part, per_host, hosts);
      EXPECT_EQ(ar.link_bytes, 2 * t.link_bytes);
      EXPECT_EQ(ar.network_bytes, 2 * t.network_bytes);
    }
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
