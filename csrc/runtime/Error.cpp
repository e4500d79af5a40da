#include "runtime/Error.h"

#include <cstdio>

namespace nrtsim {

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buf[48];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", value, kUnits[unit]);
  }
  return buf;
}

namespace {
std::string oom_message(int device, uint64_t requested, uint64_t free, uint64_t capacity,
                        OomCause cause) {
  const std::string asked = format_bytes(requested) + " (" + std::to_string(requested) + " bytes)";
  if (cause == OomCause::kHostRefused) {
    return "neuron:" + std::to_string(device) + " could not allocate " + asked +
           ": the host refused the memory (the simulated core still has " + format_bytes(free) +
           " of its " + format_bytes(capacity) +
           " HBM free; nrtsim keeps device memory in host memory). The process's address-space "
           "or memory limit, or the machine's free memory, is what ran out: raise the limit "
           "(ulimit -v, the container's memory limit), free host memory, or use smaller tensors. "
           "NRTSIM_HBM_BYTES does not help: it sets the simulated capacity, which is not the "
           "limit here.";
  }
  return "neuron:" + std::to_string(device) + " is out of HBM: tried to allocate " + asked +
         " with " + format_bytes(free) + " (" + std::to_string(free) +
         " bytes) free of a capacity of " + format_bytes(capacity) + " (" +
         std::to_string(capacity) +
         " bytes). Free tensors you no longer need, call torch.neuron.empty_cache(), use a "
         "smaller batch, or raise the simulated capacity with NRTSIM_HBM_BYTES.";
}
}  // namespace

OutOfMemoryError::OutOfMemoryError(int device, uint64_t requested, uint64_t free,
                                   uint64_t capacity, OomCause cause)
    : Error(ErrorCode::kOutOfMemory, oom_message(device, requested, free, capacity, cause)),
      device_(device),
      requested_(requested),
      free_(free),
      capacity_(capacity),
      cause_(cause) {}

}  // namespace nrtsim
