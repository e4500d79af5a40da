// The host memory behind this process's large device allocations, kept in one memory file
// (memfd) that the other ranks of a job on the same host can map. On a Trainium instance a
// collective moves data between NeuronCores' HBM with DMA over NeuronLink, no host copy in
// between; here each core's HBM is host memory of its rank's process, and mapping a peer's file is
// what lets a rank load and store that peer's buffers directly (collective transport,
// "single copy").
//
// Each allocation is its own mapping of the file at a fresh offset: offsets only grow (the file is
// sparse, and a freed allocation's pages go back to the host by punching a hole), so an offset
// names one allocation for the life of the process and a peer's cached mapping can never come to
// show another allocation's bytes.
//
// A child forked from a process that used the device cannot use the device (Runtime::get says
// so); it starts a file of its own on its first allocation, and never gives back pages of the
// parent's file (freeing an inherited allocation only unmaps it in the child).
//
// NRTSIM_SHARED_HBM=0 turns it off (allocations come from private memory, peers fall back to
// process_vm_readv/writev or the shared-memory slots).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "runtime/AddressRanges.h"

namespace nrtsim {

class SharedHbm {
 public:
  // Allocations smaller than this stay in private memory: collectives move small messages
  // through the slots anyway, and a page per tiny tensor would waste memory.
  static constexpr size_t kMinBytes = 64 << 10;
  static constexpr size_t kPage = 4096;

  static SharedHbm& instance();  // process-wide: every core of the process shares one file

  // The file, for peers: /proc/<pid>/fd/<fd> opens it; (device, inode) identify it. fd is -1
  // while disabled or when the host refused a memfd (see status()).
  struct FileId {
    int fd = -1;
    uint64_t device = 0;
    uint64_t inode = 0;
  };
  FileId file();
  const std::string& status() const { return status_; }

  // `bytes` (rounded up to a page) at a fresh offset of the file; nullptr when disabled, below
  // kMinBytes, or when the host refuses (the caller then uses private memory).
  void* allocate(size_t bytes);
  // True when `ptr` came from allocate() (it is unmapped and its pages returned to the host).
  bool release(void* ptr);

  // Where [ptr, ptr + bytes) lies in the file: the allocation holding it (its file offset and
  // length) and the offset of ptr inside that allocation. nullopt when it is not in one live
  // allocation of this process's own file.
  struct Location {
    uint64_t alloc_offset = 0;
    uint64_t alloc_bytes = 0;
    uint64_t offset_in_alloc = 0;
  };
  std::optional<Location> locate(const void* ptr, size_t bytes) const;

 private:
  SharedHbm();
  // The memfd of this process, made on first use (again in a forked child); false when off.
  bool open_file_locked();

  struct Allocation {
    uint64_t offset;
    uint64_t bytes;
    int owner_pid;  // the process whose file holds it (another one: inherited through fork())
  };

  mutable std::mutex mutex_;
  int fd_ = -1;
  int owner_pid_ = 0;  // the process the file belongs to
  FileId id_;
  uint64_t next_offset_ = 0;
  std::string status_ = "not opened";
  AddressRanges ranges_;
  std::unordered_map<uintptr_t, Allocation> allocations_;  // by start address
};

}  // namespace nrtsim
