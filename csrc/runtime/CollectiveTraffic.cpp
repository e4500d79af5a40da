#include "runtime/CollectiveTraffic.h"

namespace nrtsim {

RankBytes hierarchical_bytes(uint32_t passes, uint64_t buffer, uint64_t group, uint64_t local) {
  RankBytes b;
  if (group <= 1 || local == 0) return b;
  if (local > group) local = group;
  // Inside the host: each pass moves (local-1)/local of the buffer in and out of every rank.
  b.link = passes * (local - 1) * buffer / local;
  // Between hosts: each pass moves the share of this rank's 1/local shard held by the other
  // hosts' ranks, (group-local)/group of it: (hosts-1)/hosts where hosts hold `local` ranks each.
  b.network = passes * (buffer / local) * (group - local) / group;
  return b;
}

}  // namespace nrtsim
