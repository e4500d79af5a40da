// Rendezvous and capability negotiation: how the ranks of a group on one host come to share a
// segment, and agree on what they can use.
//
// Rank 0 creates the segment (an anonymous memory file, ShmSegment.h) and calls `created`, where
// the caller publishes its name (the backend does through the c10d Store); the others open it by
// that name. Every rank then publishes its capabilities in its control block and counts itself
// in; once all have, each opens every peer's device memory file (read-only, PeerHbm.h) and counts
// itself in again; the group then takes one answer, the same on every rank: device memory is
// mapped only if every rank could map every peer's, with a status line naming who could not and
// why.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "runtime/transport/GroupSegment.h"
#include "runtime/transport/PeerHbm.h"

namespace nrtsim::transport {

struct TransportOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  size_t slot_bytes = 8u << 20;     // per rank; half of it is one step's payload
  size_t channel_bytes = 1u << 20;  // per ordered pair of ranks, for send/recv
  // Peers' device memory mapped read-only (SharedHbm's files): collectives on buffers in it
  // move each byte once, at memcpy speed. Off: NRTSIM_COLLECTIVE_SINGLE_COPY=0 (or
  // NRTSIM_SHARED_HBM=0); a rank that has it off turns it off for the group.
  bool mapped = true;
  // Below this the slots win: one barrier where mapped memory takes two or three, and copies
  // that stay in cache. 4 ranks on 2 cores (docs/benchmarks.md, "Waits that yield, mapped
  // from 128 KiB"): all-reduce and reduce-scatter even at 64 KiB, mapped ahead from 128 KiB
  // (all-reduce 85 against 97 us, reduce-scatter 61 against 96), all-gather from 256 KiB
  // (Allgather.cpp).
  // NRTSIM_COLLECTIVE_MAPPED_BYTES=<bytes> overrides it. The group takes the largest.
  size_t mapped_min_bytes = 128u << 10;
};

// What the group agreed on.
struct Negotiated {
  bool mapped = false;
  std::string mapped_status = "not negotiated";
  size_t mapped_min_bytes = 0;
  std::unique_ptr<PeerHbm> peers;  // the peers' device memory, when mapped
};

class Rendezvous {
 public:
  // Rank 0: creates the segment `name` sized for `size` ranks, then calls `created`. The
  // options' sizes are rounded up to what the layout needs.
  static std::unique_ptr<GroupSegment> create(const std::string& name, int size,
                                              TransportOptions& options,
                                              const std::function<void()>& created = {});
  // Ranks 1..size-1: opens the segment rank 0 created and takes its sizes.
  static std::unique_ptr<GroupSegment> join(const std::string& name, int rank, int size,
                                            TransportOptions& options);
  // Every rank, once it has the segment: reads the environment's overrides into `options`,
  // publishes this rank, waits until every rank has, and negotiates what the group uses.
  // Fails naming the ranks that did not come within the timeout.
  static Negotiated meet(GroupSegment& group, TransportOptions& options);
};

}  // namespace nrtsim::transport
