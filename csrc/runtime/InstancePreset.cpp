#include "runtime/InstancePreset.h"

#include "runtime/Error.h"

namespace nrtsim {

namespace {
constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

ChipSpec trainium1() { return {"Trainium1", 2, 32 * kGiB, 1, {1}}; }
ChipSpec trainium2() { return {"Trainium2", 8, 96 * kGiB, 2, {1, 2}}; }
ChipSpec trainium3() { return {"Trainium3", 8, 144 * kGiB, 2, {1, 2}}; }
}  // namespace

const std::vector<InstancePreset>& all_presets() {
  static const std::vector<InstancePreset> presets = {
      {"trn1.2xlarge", trainium1(), 1},
      {"trn1.32xlarge", trainium1(), 16},
      {"trn2.3xlarge", trainium2(), 1},
      {"trn2.48xlarge", trainium2(), 16},
      {"trn2u.48xlarge", trainium2(), 16},
      {"trn3.3xlarge", trainium3(), 1},
      {"trn3.48xlarge", trainium3(), 16},
  };
  return presets;
}

const InstancePreset& find_preset(std::string_view name) {
  std::string known;
  for (const auto& preset : all_presets()) {
    if (preset.name == name) return preset;
    known += (known.empty() ? "" : ", ") + preset.name;
  }
  throw Error(ErrorCode::kConfiguration, "NRTSIM_INSTANCE='" + std::string(name) +
                                             "' is not a known instance type; choose one of: " +
                                             known);
}

}  // namespace nrtsim
