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
std::string oom_message(int device, uint64_t requested, uint64_t free, uint64_t capacity) {
  return "neuron:" + std::to_string(device) + " is out of HBM: tried to allocate " +
         format_bytes(requested) + " (" + std::to_string(requested) + " bytes) with " +
         format_bytes(free) + " (" + std::to_string(free) + " bytes) free of a capacity of " +
         format_bytes(capacity) + " (" + std::to_string(capacity) +
         " bytes). Free tensors you no longer need, call torch.neuron.empty_cache(), use a "
         "smaller batch, or raise the simulated capacity with NRTSIM_HBM_BYTES.";
}
}  // namespace

OutOfMemoryError::OutOfMemoryError(int device, uint64_t requested, uint64_t free,
                                   uint64_t capacity)
    : Error(ErrorCode::kOutOfMemory, oom_message(device, requested, free, capacity)),
      device_(device),
      requested_(requested),
      free_(free),
      capacity_(capacity) {}

}  // namespace nrtsim
