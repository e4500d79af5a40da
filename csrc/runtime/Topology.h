// Which NeuronCores this process sees. Built once from the environment the way the Neuron
// runtime reads it: the instance (NRTSIM_INSTANCE), how many physical cores form one logical
// core (NEURON_LOGICAL_NC_CONFIG), and the process's share (NEURON_RT_VISIBLE_CORES or
// NEURON_RT_NUM_CORES). PyTorch device index i is the i-th visible logical core.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/InstancePreset.h"

namespace nrtsim {

struct TopologyConfig {
  std::string instance{kDefaultInstance};
  std::optional<int> lnc;                   // NEURON_LOGICAL_NC_CONFIG
  std::optional<std::string> visible_cores;  // NEURON_RT_VISIBLE_CORES (logical core ids)
  std::optional<int> num_cores;             // NEURON_RT_NUM_CORES
  std::optional<uint64_t> hbm_bytes;        // NRTSIM_HBM_BYTES, per logical core

  static TopologyConfig from_environment();
};

struct LogicalCore {
  int device_index;                // what PyTorch calls neuron:<device_index>
  int logical_id;                  // id on the instance, as NEURON_RT_VISIBLE_CORES counts
  int chip;                        // chip the core sits on
  std::vector<int> physical_cores;  // instance-wide physical core ids it fuses
  uint64_t hbm_capacity;           // bytes of HBM this logical core may hold
};

class Topology {
 public:
  // Validates the configuration; throws Error(kConfiguration) naming the offending variable.
  static Topology build(const TopologyConfig& config);

  const InstancePreset& instance() const { return *instance_; }
  int lnc() const { return lnc_; }
  int logical_cores_on_instance() const { return instance_->physical_cores() / lnc_; }
  int device_count() const { return static_cast<int>(cores_.size()); }
  const std::vector<LogicalCore>& cores() const { return cores_; }
  const LogicalCore& core(int device_index) const;  // throws kInvalidDevice
  std::string describe() const;

 private:
  const InstancePreset* instance_ = nullptr;
  int lnc_ = 1;
  std::vector<LogicalCore> cores_;
};

// PyTorch counts a process's devices in a c10::DeviceIndex, an int8: at most 127. Index 127 would
// fit, but not a count of 128, and PyTorch sizes per-device tables by that count (autograd's
// caller streams, its device threads): a 128th device would be read past their end. CUDA refuses
// more than 127 devices for the same reason.
inline constexpr int kMaxDevicesPerProcess = 127;

}  // namespace nrtsim
