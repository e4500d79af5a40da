#include "runtime/cost/Collectives.h"

#include <algorithm>
#include <cstdint>

namespace nrtsim::cost {

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

CollectiveTraffic traffic_of(CollectiveKind kind, double bytes, int ranks, int stride,
                             const InstanceSpec& instance, const RankModel& rank,
                             bool inference) {
  CollectiveTraffic t;
  if (ranks <= 1 || bytes <= 0) return t;
  const int rpd = rank.ranks_per_device();
  const int per_instance = instance.devices * rpd;
  // Members of the group inside one instance, and the instances it spans.
  const int g = stride >= per_instance ? 1 : std::min(ranks, std::max(1, per_instance / stride));
  const int k = ceil_div(ranks, g);
  const uint64_t b = static_cast<uint64_t>(bytes);
  const uint64_t l = static_cast<uint64_t>(g);
  const uint64_t h = static_cast<uint64_t>(k);
  t.buffer_bytes = b;
  t.ranks = static_cast<uint32_t>(g);
  t.hosts = static_cast<uint32_t>(k);
  // Members per device: every rank of a device takes part in a collective of its own group at
  // the same time, so a strided group has fewer of its members on each chip.
  t.ranks_per_chip = static_cast<uint32_t>(stride >= rpd ? 1 : std::min(g, rpd / stride));
  t.serving = inference;
  t.passes = kind == CollectiveKind::kAllReduce ? 2 : 1;
  // What one rank moves, as a process group reports it (runtime/transport/Verb.cpp), for a
  // hierarchical collective: inside the instance on the whole buffer, then between instances on
  // this rank's 1/g of it (the one statement of it both use, runtime/CollectiveTraffic.h).
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: {
      const RankBytes r = hierarchical_bytes(t.passes, b, static_cast<uint64_t>(ranks), l);
      t.link_bytes = r.link;
      t.network_bytes = r.network;
      break;
    }
    case CollectiveKind::kAllToAll:
      // Every member sends each peer its piece at once: g / ranks of the buffer stays inside the
      // instance, (k - 1) / k of it leaves.
      t.all_to_all = true;
      t.link_bytes = (l - 1) * b / static_cast<uint64_t>(ranks);
      t.network_bytes = (h - 1) * b / h;
      break;
    case CollectiveKind::kSend:
      // A send crosses one boundary only: to a rank of another instance over the network alone.
      t.point_to_point = true;
      if (k > 1) {
        t.ranks = 1;
        t.network_bytes = b;
      } else {
        t.ranks = 2;
        t.link_bytes = b;
      }
      break;
  }
  return t;
}

CoreLinks links_of(const InstanceSpec& instance, const CostData& data, const RankModel& rank) {
  return CoreLinks(data.link(instance.scale_up), data.link(instance.scale_out), instance.is_gpu(),
                   rank.ranks_per_device(), instance.efa_gbits_per_s / std::max(instance.devices, 1),
                   rank.hbm_bytes_per_ns());
}

double collective_link_ns(CollectiveKind kind, double bytes, int ranks, int stride,
                          const InstanceSpec& instance, const CostData& data, const RankModel& rank,
                          std::string* over, bool inference) {
  if (ranks <= 1 || bytes <= 0) return 0;
  return links_of(instance, data, rank)
      .collective_ns(traffic_of(kind, bytes, ranks, stride, instance, rank, inference), over);
}

double collective_ns(CollectiveKind kind, double bytes, int ranks, int stride,
                     const InstanceSpec& instance, const CostData& data, const RankModel& rank,
                     std::string* over, bool inference) {
  if (ranks <= 1 || bytes <= 0) return 0;
  // The compute engines trigger the collective (its own cores run it) and wait for its
  // completion semaphore: one dependent step of the program, as any op that waits on the one
  // before it. (The simulated clock charges an eager collective its launch's fixed cost instead.)
  return collective_link_ns(kind, bytes, ranks, stride, instance, data, rank, over, inference) +
         rank.efficiency().op_latency_us * 1e3;
}

}  // namespace nrtsim::cost
