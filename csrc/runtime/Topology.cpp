#include "runtime/Topology.h"

#include "runtime/Env.h"
#include "runtime/Error.h"

namespace nrtsim {

TopologyConfig TopologyConfig::from_environment() {
  TopologyConfig config;
  if (auto v = env::get("NRTSIM_INSTANCE")) config.instance = *v;
  config.lnc = env::int_value("NEURON_LOGICAL_NC_CONFIG");
  // Parsed by build(), which knows how many cores exist.
  if (auto v = env::get("NEURON_RT_VISIBLE_CORES")) config.visible_cores = *v;
  config.num_cores = env::int_value("NEURON_RT_NUM_CORES");
  config.hbm_bytes = env::bytes_value("NRTSIM_HBM_BYTES");
  return config;
}

Topology Topology::build(const TopologyConfig& config) {
  Topology topo;
  topo.instance_ = &find_preset(config.instance);
  const ChipSpec& chip = topo.instance_->chip;

  topo.lnc_ = config.lnc.value_or(chip.default_lnc);
  bool lnc_valid = false;
  std::string valid;
  for (int v : chip.valid_lnc) {
    lnc_valid = lnc_valid || v == topo.lnc_;
    valid += (valid.empty() ? "" : " or ") + std::to_string(v);
  }
  if (!lnc_valid) {
    throw Error(ErrorCode::kConfiguration,
                "NEURON_LOGICAL_NC_CONFIG=" + std::to_string(topo.lnc_) + " is not supported on " +
                    chip.name + " (" + topo.instance_->name + "); use " + valid);
  }

  const int per_chip = chip.physical_cores / topo.lnc_;
  const int total = per_chip * topo.instance_->chips;
  const std::string where = " on " + topo.instance_->name + " with NEURON_LOGICAL_NC_CONFIG=" +
                            std::to_string(topo.lnc_) + ", which has " + std::to_string(total) +
                            " logical NeuronCores (0-" + std::to_string(total - 1) + ")";

  std::vector<int> selected;
  if (config.visible_cores) {
    // NEURON_RT_VISIBLE_CORES names cores explicitly and so takes precedence over a count.
    selected = env::parse_core_list("NEURON_RT_VISIBLE_CORES", *config.visible_cores);
    if (selected.back() >= total) {
      throw Error(ErrorCode::kConfiguration,
                  "NEURON_RT_VISIBLE_CORES='" + *config.visible_cores + "' names core " +
                      std::to_string(selected.back()) + ", which does not exist" + where);
    }
  } else if (config.num_cores) {
    if (*config.num_cores < 1 || *config.num_cores > total) {
      throw Error(ErrorCode::kConfiguration,
                  "NEURON_RT_NUM_CORES=" + std::to_string(*config.num_cores) +
                      " must be between 1 and " + std::to_string(total) + where);
    }
    for (int i = 0; i < *config.num_cores; ++i) selected.push_back(i);
  } else {
    for (int i = 0; i < total; ++i) selected.push_back(i);
  }
  // The 48xlarge instances at LNC=1 have 128 logical cores: one more than a process can use.
  if (static_cast<int>(selected.size()) > kMaxDevicesPerProcess) {
    throw Error(ErrorCode::kConfiguration,
                "this process would see " + std::to_string(selected.size()) +
                    " logical NeuronCores" + where + ", but PyTorch counts a process's devices "
                    "in a signed byte and so addresses at most " +
                    std::to_string(kMaxDevicesPerProcess) +
                    " devices per process; select fewer with NEURON_RT_VISIBLE_CORES or "
                    "NEURON_RT_NUM_CORES (one process per chip or per core is usual; to use every "
                    "core, give the processes disjoint sets, e.g. 0-63 and 64-127)");
  }

  const uint64_t capacity = config.hbm_bytes.value_or(chip.hbm_bytes / per_chip);
  for (size_t i = 0; i < selected.size(); ++i) {
    LogicalCore core;
    core.device_index = static_cast<int>(i);
    core.logical_id = selected[i];
    core.chip = selected[i] / per_chip;
    for (int p = 0; p < topo.lnc_; ++p) core.physical_cores.push_back(selected[i] * topo.lnc_ + p);
    core.hbm_capacity = capacity;
    topo.cores_.push_back(std::move(core));
  }
  return topo;
}

const LogicalCore& Topology::core(int device_index) const {
  if (device_index < 0 || device_index >= device_count()) {
    // TorchNeuron's sentence, then which devices exist and what sets them: the same words as
    // the backend's check_device_index and torch.neuron's ValueError.
    const int count = device_count();
    throw Error(ErrorCode::kInvalidDevice,
                "Device index " + std::to_string(device_index) +
                    " is out of range. Valid range is 0 to " + std::to_string(count - 1) +
                    " for this process: neuron:" + std::to_string(device_index) +
                    " does not exist among its " + std::to_string(count) +
                    " NeuronCore device(s) (neuron:0" +
                    (count > 1 ? "-neuron:" + std::to_string(count - 1) : "") +
                    "), set by NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES");
  }
  return cores_[device_index];
}

std::string Topology::describe() const {
  return instance_->name + " (" + std::to_string(instance_->chips) + " x " +
         instance_->chip.name + ", LNC=" + std::to_string(lnc_) + ", " +
         std::to_string(device_count()) + " visible logical NeuronCores)";
}

}  // namespace nrtsim
