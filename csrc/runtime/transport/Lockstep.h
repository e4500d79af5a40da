// The machinery every collective algorithm runs on (Algorithms.h): lockstep steps through the
// ranks' slots, and the peers' device memory mapped read-only.
//
// Steps: each rank writes into its own slot, all meet at a barrier, each reads what it needs from
// the others' slots. Slots are split in two halves used by alternate steps, so a step's writes
// can only overwrite a half every rank has finished reading two steps earlier, and one barrier
// per step suffices. A collective's first barrier also checks that every rank called the same
// one (verb, element type, size, root, reduce op: its descriptor), so that a mismatch fails on
// every rank alike, naming each rank's call, and leaves the group usable.
//
// Mapped memory: a collective on buffers in the ranks' device memory files publishes where they
// are (in the slot half), meets once, and then every rank reads what it needs straight from its
// peers' buffers and writes only its own: each byte moves once, at memcpy speed. Every rank reads
// the same published tables, so all agree whether the operation can go that way or must take the
// slots.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/transport/GroupSegment.h"
#include "runtime/transport/Health.h"
#include "runtime/transport/Reduce.h"
#include "runtime/transport/Rendezvous.h"
#include "runtime/transport/Verb.h"

namespace nrtsim::transport {

class Lockstep {
 public:
  Lockstep(GroupSegment& group, Health& health, Negotiated& negotiated, size_t slot_bytes)
      : group_(group), health_(health), negotiated_(negotiated), half_bytes_(slot_bytes / 2) {}

  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  Health& health() { return health_; }
  Verb current() const { return current_; }
  const char* what() const { return verb_name(current_); }

  // Begins a collective: this rank's descriptor, checked against every rank's at the first sync.
  void begin(Verb verb, DType dtype, uint64_t count, int64_t root, uint64_t aux);
  // A barrier of the group (the first of a collective also checks the descriptors).
  void sync();

  // The slot halves of the current step; next_step() moves to the other half.
  char* my_half() const { return half_of(rank()); }
  char* half_of(int r) const { return group_.slot(r) + (step_ % 2) * half_bytes_; }
  size_t half_bytes() const { return half_bytes_; }
  void next_step() { ++step_; }

  // Whether an operation moving `bytes` in all tries mapped memory (the same answer on every
  // rank whose descriptor matches). `slot_part`, for operations where one rank copies what the
  // others only hand over (broadcast, gather, scatter): what one rank's slot carries of the
  // message on the slot path. There mapped memory saves only that one copy but costs a second
  // barrier (with more ranks than cores, about as much as copying a MiB or two), so it is taken
  // once one rank's part is a quarter of a step (1 MiB with the default slots). All-gather passes
  // none: every rank copies the whole output either way (Allgather.cpp).
  bool use_mapped(size_t bytes, size_t slot_part = 0) const {
    return negotiated_.mapped && size() > 1 && bytes >= negotiated_.mapped_min_bytes &&
           (slot_part == 0 || slot_part >= half_bytes_ / 4);
  }
  bool mapped() const { return negotiated_.mapped; }

  // Publishes where `n` buffers of `bytes` each (or sizes[i] each) are, in this rank's slot half
  // (from byte `at`: a table may follow other data in the half).
  void publish(const void* const* addresses, int n, size_t bytes, size_t at = 0,
               const size_t* sizes = nullptr);
  // After the barrier that follows publish: whether the buffers the peers will read are all in
  // mapped memory: `n` entries of every rank, or only of rank `only`, or of every rank but
  // `skip`. All ranks read the same tables, so all agree; false: the operation takes the slots.
  bool all_mapped(int n, int only = -1, int skip = -1, size_t at = 0);
  // Entry `index` of rank `peer`'s published table, mapped here (a refused mapping fails the
  // group). For this rank itself: the address it published.
  const char* peer(int peer, int index, size_t at = 0);
  // Collectives so far that moved every buffer through mapped memory.
  uint64_t mapped_ops() const { return mapped_ops_; }
  void count_mapped_op() { ++mapped_ops_; }

  static constexpr int kEntryWords = 4;  // address, file offset, allocation length, offset in it

 private:
  void check_descriptors();
  const char* map_entry(int peer, const uint64_t* entry);

  GroupSegment& group_;
  Health& health_;
  Negotiated& negotiated_;
  size_t half_bytes_;
  uint64_t epoch_ = 0;   // barriers this rank has passed
  uint64_t step_ = 0;    // slot half in use: step_ % 2
  uint64_t op_seq_ = 0;  // collectives begun
  bool check_pending_ = false;
  Verb current_ = Verb::kBarrier;
  uint64_t mapped_ops_ = 0;
};

}  // namespace nrtsim::transport
