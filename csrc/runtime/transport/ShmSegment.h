// A POSIX shared-memory segment (/dev/shm) mapped into this process: the memory of the simulated
// NeuronLink between the processes of one host. RAII: the mapping goes with the object. The name
// is unlinked by whoever calls unlink(), as soon as every process has mapped it, so that nothing
// outlives the job even when a process is killed (the kernel frees an unlinked segment when its
// last mapping goes).
#pragma once

#include <cstddef>
#include <string>

namespace nrtsim::transport {

class ShmSegment {
 public:
  ShmSegment() = default;
  // Creates `name` (which must not exist yet) with `bytes` zero bytes and maps it.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps the existing segment `name` whole.
  static ShmSegment open(const std::string& name);
  // Removes the name; existing mappings stay valid. Missing names are not an error.
  static void unlink(const std::string& name);
  // A name no other job will use: prefix, process id and random bits.
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
};

}  // namespace nrtsim::transport
