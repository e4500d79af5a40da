// The Trainium instance types nrtsim can pretend to be. Numbers are the public hardware specs:
// cores per chip, HBM per chip, the default and valid logical-core (LNC) settings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nrtsim {

struct ChipSpec {
  std::string name;                 // "Trainium2"
  int physical_cores;               // NeuronCores per chip
  uint64_t hbm_bytes;               // HBM per chip
  int default_lnc;                  // physical cores fused into one logical core by default
  std::vector<int> valid_lnc;       // settings NEURON_LOGICAL_NC_CONFIG may take
};

struct InstancePreset {
  std::string name;                 // "trn2.3xlarge"
  ChipSpec chip;
  int chips;

  int physical_cores() const { return chip.physical_cores * chips; }
};

// The preset used when NRTSIM_INSTANCE is unset: one Trainium2 chip.
inline constexpr std::string_view kDefaultInstance = "trn2.3xlarge";

// Throws Error(kConfiguration) listing the known names when `name` is not one of them.
const InstancePreset& find_preset(std::string_view name);
const std::vector<InstancePreset>& all_presets();

}  // namespace nrtsim
