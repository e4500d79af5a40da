// The shared memory of one group on one host, and its layout: a header, one control block per
// rank, one data slot per rank for the lockstep collectives, and one ring per ordered pair of
// ranks for point-to-point messages. Every unit of the transport (rendezvous, health, lockstep,
// point to point) reads and writes the group through this one description.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime/transport/ShmSegment.h"

namespace nrtsim::transport {

constexpr uint64_t kSegmentMagic = 0x6e727473696d6c6bULL;  // "nrtsimlk"
constexpr size_t kPage = 4096;

inline size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

struct alignas(64) GroupHeader {
  std::atomic<uint64_t> magic;
  uint32_t size;
  uint32_t reserved;
  uint64_t slot_bytes;
  uint64_t channel_bytes;
  alignas(64) std::atomic<uint32_t> doorbell;  // bumped at every barrier arrival (a futex word)
  alignas(64) std::atomic<uint32_t> joined;    // ranks that have mapped the segment (a futex word)
  std::atomic<uint32_t> negotiated;            // ranks that have published what they can map
  std::atomic<uint32_t> aborted;               // 0 no, 1 being written, 2 reason readable
  int32_t abort_rank;
  char abort_reason[448];
};
static_assert(sizeof(GroupHeader) <= kPage);

// What a rank is about to do: checked against every other rank's at the collective's first
// barrier.
struct Descriptor {
  uint64_t seq;
  uint32_t verb;
  uint32_t dtype;
  uint64_t count;
  int64_t root;
  uint64_t aux;
};

struct alignas(128) RankControl {
  std::atomic<uint64_t> arrived;   // barriers passed
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> doorbell;  // bumped when a peer wrote to, or read from, a ring of ours
  Descriptor desc[2];              // by collective sequence parity
  // Capabilities, published before the rendezvous' closing barrier (Rendezvous.h): this rank's
  // device memory file (fd -1: none), whether it could open every peer's (0 not yet, 1 all,
  // 2 not wanted, 3 a peer's failed: which and why), and the smallest message it maps.
  int32_t hbm_fd;
  uint64_t hbm_device;
  uint64_t hbm_inode;
  std::atomic<uint32_t> mapped;
  int32_t mapped_peer;
  uint64_t mapped_min_bytes;
  char mapped_why[192];
};

struct alignas(128) Ring {
  std::atomic<uint64_t> head;  // bytes ever written (by the sender)
  char pad[56];
  std::atomic<uint64_t> tail;  // bytes ever read (by the receiver)
};

// The segment of a group, mapped, with its parts located. Owns the mapping.
class GroupSegment {
 public:
  static size_t total_bytes(int size, size_t slot_bytes, size_t channel_bytes);

  GroupSegment(ShmSegment segment, int rank, int size, size_t slot_bytes, size_t channel_bytes);
  GroupSegment(const GroupSegment&) = delete;
  GroupSegment& operator=(const GroupSegment&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return segment_.name(); }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t channel_bytes() const { return channel_bytes_; }

  GroupHeader& header() const { return *header_; }
  RankControl& control(int r) const { return controls_[r]; }
  RankControl& mine() const { return controls_[rank_]; }
  char* slot(int r) const { return slots_ + static_cast<size_t>(r) * slot_bytes_; }
  Ring& ring(int from, int to) const { return rings_[from * size_ + to]; }
  char* ring_bytes(int from, int to) const {
    return ring_data_ + (static_cast<size_t>(from) * size_ + to) * channel_bytes_;
  }

 private:
  ShmSegment segment_;
  int rank_;
  int size_;
  size_t slot_bytes_;
  size_t channel_bytes_;
  GroupHeader* header_;
  RankControl* controls_;
  char* slots_;
  Ring* rings_;
  char* ring_data_;
};

}  // namespace nrtsim::transport
