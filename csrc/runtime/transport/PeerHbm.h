// The device memory of the other ranks of a group, mapped into this process READ-ONLY: each
// peer's SharedHbm file, opened through /proc/<pid>/fd/<fd> for reading (the kernel checks the
// same-user, ptrace-read permission there, which Yama leaves alone; no rank widens who may
// attach to it), and its allocations mapped on first use. With them a rank reads a peer's
// buffers with plain loads, as NeuronCores' DMA engines reach each other's HBM over NeuronLink;
// it writes only its own memory, so no rank can corrupt another's.
//
// Mappings are kept for later collectives on the same buffers (a training step reuses its
// gradient buckets and parameter shards), up to kMaxMappings; past that the least recently used
// are unmapped. A peer never reuses a file offset (SharedHbm), so a kept mapping can only ever
// show the allocation it was made for.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nrtsim::transport {

class PeerHbm {
 public:
  static constexpr size_t kMaxMappings = 1024;

  explicit PeerHbm(int size) : fds_(size, -1) {}
  ~PeerHbm();
  PeerHbm(const PeerHbm&) = delete;
  PeerHbm& operator=(const PeerHbm&) = delete;

  // Opens `peer`'s file and checks that it is the one the peer published. "" on success, else
  // why not (for the group's status line).
  std::string open(int peer, int pid, int fd, uint64_t device, uint64_t inode);
  bool is_open(int peer) const { return fds_[peer] >= 0; }

  // `peer`'s allocation at file offset `offset` (`bytes` long), mapped read-only; `use` is the
  // caller's operation counter, so that mappings of the current operation are never evicted.
  // nullptr with errno set when the host refuses the mapping.
  const char* map(int peer, uint64_t offset, uint64_t bytes, uint64_t use);

 private:
  struct Mapping {
    char* base;
    uint64_t bytes;
    uint64_t last_use;
  };
  void evict(uint64_t use);

  std::vector<int> fds_;
  std::map<std::pair<int, uint64_t>, Mapping> mappings_;  // by (peer, file offset)
};

}  // namespace nrtsim::transport
