// A shared-memory segment mapped into this process: the memory of the simulated NeuronLink
// between the processes of one host. RAII: the mapping goes with the object. It is an anonymous
// memory file (memfd) that other processes of the same user open through its creator's
// /proc/<pid>/fd entry, so it has no name in /dev/shm that could outlive the job: the kernel frees
// it when its last mapping and descriptor go, whatever way the processes end (SIGKILL included,
// even during the rendezvous).
#pragma once

#include <cstddef>
#include <string>

namespace nrtsim::transport {

class ShmSegment {
 public:
  ShmSegment() = default;
  // Creates a segment labelled `name` (from unique_name) with `bytes` zero bytes and maps it.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps the segment `name` whole, while its creator (named in it) is alive.
  static ShmSegment open(const std::string& name);
  // Where a named segment would be removed; a memfd has no name, so nothing is left to do.
  static void unlink(const std::string& name);
  // A name no other job will use: prefix, creator's process id and random bits.
  static std::string unique_name(const std::string& prefix);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, char* data, size_t size)
      : name_(std::move(name)), data_(data), size_(size) {}
  std::string name_;
  char* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // the creator keeps the memfd open for the joiners
};

}  // namespace nrtsim::transport
