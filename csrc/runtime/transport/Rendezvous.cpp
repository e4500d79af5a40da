#include "runtime/transport/Rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "runtime/Env.h"
#include "runtime/Error.h"
#include "runtime/SharedHbm.h"
#include "runtime/transport/Health.h"

namespace nrtsim::transport {

namespace {

// Waits until every rank has counted itself in on `count` (`arrived(r)` says whether rank r
// has): the group's timeout bounds it, and a rank that came and then exited fails it at once.
void wait_for_all(GroupSegment& g, std::atomic<uint32_t>& count, const TransportOptions& o,
                  const char* stage, const std::function<bool(int)>& arrived) {
  count.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(count);
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const uint32_t seen = count.load(std::memory_order_acquire);
    if (seen >= static_cast<uint32_t>(g.size())) return;
    std::vector<int> missing, dead;
    for (int r = 0; r < g.size(); ++r) {
      if (arrived(r)) continue;
      missing.push_back(r);
      if (process_ended(g.control(r).pid.load(std::memory_order_acquire))) dead.push_back(r);
    }
    if (!dead.empty() && count.load(std::memory_order_acquire) < static_cast<uint32_t>(g.size())) {
      throw Error(ErrorCode::kConfiguration, "collective transport: rank(s) " + rank_list(dead) +
                                                 " exited while the group was being created (" +
                                                 stage + ")");
    }
    if (std::chrono::steady_clock::now() - start > o.timeout) {
      throw Error(ErrorCode::kConfiguration,
                  "collective transport: rank(s) " + rank_list(missing) + " did not " + stage +
                      " within the timeout of " + std::to_string(o.timeout.count()) +
                      " ms (did every rank of the group start and create it?)");
    }
    futex_wait(count, seen, 5'000'000);
  }
}

void read_environment(TransportOptions& o) {
  // NRTSIM_COLLECTIVE_SINGLE_COPY names the single-copy path (mapped device memory): 0 turns it
  // off; 1 and auto leave it on.
  if (const auto v = env::get("NRTSIM_COLLECTIVE_SINGLE_COPY")) {
    if (env::parse_auto_switch("NRTSIM_COLLECTIVE_SINGLE_COPY", *v) == false) o.mapped = false;
  }
  if (const auto v = env::bytes_value("NRTSIM_COLLECTIVE_MAPPED_BYTES")) o.mapped_min_bytes = *v;
}

// Opens every peer's device memory file, read-only; publishes what came of it.
std::unique_ptr<PeerHbm> open_peers(GroupSegment& g, const TransportOptions& o) {
  RankControl& me = g.mine();
  if (me.hbm_fd < 0) {
    std::snprintf(me.mapped_why, sizeof(me.mapped_why), "%s",
                  !o.mapped ? "single copy is off (NRTSIM_COLLECTIVE_SINGLE_COPY=0)"
                            : SharedHbm::instance().status().c_str());
    me.mapped.store(2, std::memory_order_release);
    return nullptr;
  }
  auto peers = std::make_unique<PeerHbm>(g.size());
  for (int k = 0; k < g.size(); ++k) {
    if (k == g.rank()) continue;
    const RankControl& c = g.control(k);
    const std::string why =
        c.hbm_fd < 0 ? "it has no device memory file"
                     : peers->open(k, c.pid.load(std::memory_order_acquire), c.hbm_fd,
                                   c.hbm_device, c.hbm_inode);
    if (!why.empty()) {
      me.mapped_peer = k;
      std::snprintf(me.mapped_why, sizeof(me.mapped_why), "%s", why.c_str());
      me.mapped.store(3, std::memory_order_release);
      return nullptr;
    }
  }
  me.mapped.store(1, std::memory_order_release);
  return peers;
}

}  // namespace

std::unique_ptr<GroupSegment> Rendezvous::create(const std::string& name, int size,
                                                 TransportOptions& o,
                                                 const std::function<void()>& created) {
  if (size < 1) throw Error(ErrorCode::kInvalidArgument, "collective group of size < 1");
  // A step must hold the alltoall size table (two entries per rank, then a place per rank) and
  // a cache line per rank.
  o.slot_bytes = align_up(
      std::max<size_t>(o.slot_bytes, std::max<size_t>(64 << 10, 256u * size)), kPage);
  o.channel_bytes = align_up(std::max<size_t>(o.channel_bytes, 4096), 64);
  ShmSegment segment =
      ShmSegment::create(name, GroupSegment::total_bytes(size, o.slot_bytes, o.channel_bytes));
  auto* header = reinterpret_cast<GroupHeader*>(segment.data());
  header->size = static_cast<uint32_t>(size);
  header->slot_bytes = o.slot_bytes;
  header->channel_bytes = o.channel_bytes;
  header->magic.store(kSegmentMagic, std::memory_order_release);
  auto group =
      std::make_unique<GroupSegment>(std::move(segment), 0, size, o.slot_bytes, o.channel_bytes);
  if (created) created();
  return group;
}

std::unique_ptr<GroupSegment> Rendezvous::join(const std::string& name, int rank, int size,
                                               TransportOptions& o) {
  ShmSegment segment = ShmSegment::open(name);
  auto* header = reinterpret_cast<GroupHeader*>(segment.data());
  if (segment.size() < kPage || header->magic.load(std::memory_order_acquire) != kSegmentMagic ||
      header->size != static_cast<uint32_t>(size) || rank <= 0 || rank >= size) {
    throw Error(ErrorCode::kInvalidArgument,
                "collective transport: segment " + name + " is not the group of " +
                    std::to_string(size) + " ranks that rank " + std::to_string(rank) +
                    " expected (was it created by another job?)");
  }
  o.slot_bytes = header->slot_bytes;
  o.channel_bytes = header->channel_bytes;
  return std::make_unique<GroupSegment>(std::move(segment), rank, size, o.slot_bytes,
                                        o.channel_bytes);
}

Negotiated Rendezvous::meet(GroupSegment& g, TransportOptions& o) {
  read_environment(o);
  RankControl& me = g.mine();
  me.hbm_fd = -1;
  if (o.mapped && g.size() > 1) {
    const SharedHbm::FileId file = SharedHbm::instance().file();
    me.hbm_fd = file.fd;
    me.hbm_device = file.device;
    me.hbm_inode = file.inode;
  }
  me.mapped_min_bytes = o.mapped_min_bytes;
  me.pid.store(static_cast<int32_t>(::getpid()), std::memory_order_release);
  GroupHeader& h = g.header();
  wait_for_all(g, h.joined, o, "join the group's shared memory",
               [&](int r) { return g.control(r).pid.load(std::memory_order_acquire) != 0; });
  // Everyone has it mapped: the name is no longer needed (a memfd never had one in /dev/shm).
  ShmSegment::unlink(g.name());

  Negotiated n;
  n.peers = open_peers(g, o);
  wait_for_all(g, h.negotiated, o, "say which device memory it can map", [&](int r) {
    return g.control(r).mapped.load(std::memory_order_acquire) != 0;
  });
  n.mapped_min_bytes = o.mapped_min_bytes;
  for (int r = 0; r < g.size(); ++r) {  // every rank takes the same threshold
    n.mapped_min_bytes = std::max<size_t>(n.mapped_min_bytes, g.control(r).mapped_min_bytes);
  }
  n.mapped = g.size() > 1;
  n.mapped_status = n.mapped ? "on" : "off: a group of one rank moves nothing";
  // Name the cause: a rank that has it off explains why its peers could not map its memory.
  for (const uint32_t cause : {2u, 3u}) {
    for (int r = 0; r < g.size() && n.mapped; ++r) {
      const RankControl& c = g.control(r);
      if (c.mapped.load(std::memory_order_acquire) != cause) continue;
      n.mapped = false;
      n.mapped_status = cause == 2 ? "off on rank " + std::to_string(r) + ": " + c.mapped_why
                                   : "off: rank " + std::to_string(r) +
                                         " cannot map the device memory of rank " +
                                         std::to_string(c.mapped_peer) + ": " + c.mapped_why;
    }
  }
  if (!n.mapped) n.peers.reset();
  o.mapped_min_bytes = n.mapped_min_bytes;
  return n;
}

}  // namespace nrtsim::transport
