// Errors raised by nrtsim. The runtime is torch-free, so it has its own exception types; the
// backend translates them into PyTorch's (c10::Error, c10::OutOfMemoryError) at its boundary.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace nrtsim {

enum class ErrorCode {
  kInvalidArgument,  // a call's arguments are wrong (bad stream id, null pointer, ...)
  kInvalidDevice,    // a device index outside the visible cores
  kConfiguration,    // an environment variable or preset that cannot be honoured
  kOutOfMemory,      // an HBM allocation beyond a core's capacity
  kBadFork,          // use of the runtime in a child forked after initialisation
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Why an HBM allocation failed. A simulated core's HBM is host memory, so an allocation can fail
// with room left on the core, when the host refuses the memory (a `ulimit -v`, a cgroup limit, a
// machine out of memory): a different problem with a different fix.
enum class OomCause {
  kHbmCapacity,  // the core's capacity is used up
  kHostRefused,  // the core has room; the host could not map the memory behind it
};

// Carries the numbers a user needs to act on an OOM: what was asked, what was left, the ceiling,
// and which of the two limits was hit.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(int device, uint64_t requested, uint64_t free, uint64_t capacity,
                   OomCause cause = OomCause::kHbmCapacity);
  OomCause cause() const noexcept { return cause_; }
  int device() const noexcept { return device_; }
  uint64_t requested() const noexcept { return requested_; }
  uint64_t free_bytes() const noexcept { return free_; }
  uint64_t capacity() const noexcept { return capacity_; }

 private:
  int device_;
  uint64_t requested_;
  uint64_t free_;
  uint64_t capacity_;
  OomCause cause_;
};

// "1.50 GiB"-style rendering used in error messages and summaries.
std::string format_bytes(uint64_t bytes);

}  // namespace nrtsim
