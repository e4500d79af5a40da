#include "runtime/EngineModel.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "runtime/Env.h"
#include "runtime/Error.h"
#include "runtime/IniFile.h"

namespace nrtsim {

namespace {

// Every key a section must have, and where its value goes.
struct Field {
  const char* key;
  double CoreSpec::*number;
};
constexpr Field kFields[] = {
    {"tensor_clock_ghz", &CoreSpec::tensor_clock_ghz},
    {"tensor_macs_per_cycle", &CoreSpec::tensor_macs_per_cycle},
    {"tensor_fp8_speedup", &CoreSpec::tensor_fp8_speedup},
    {"tensor_fp32_slowdown", &CoreSpec::tensor_fp32_slowdown},
    {"vector_clock_ghz", &CoreSpec::vector_clock_ghz},
    {"vector_elements_per_cycle_16bit", &CoreSpec::vector_elements_per_cycle_16bit},
    {"vector_elements_per_cycle", &CoreSpec::vector_elements_per_cycle},
    {"scalar_clock_ghz", &CoreSpec::scalar_clock_ghz},
    {"scalar_elements_per_cycle_16bit", &CoreSpec::scalar_elements_per_cycle_16bit},
    {"scalar_elements_per_cycle", &CoreSpec::scalar_elements_per_cycle},
    {"gpsimd_clock_ghz", &CoreSpec::gpsimd_clock_ghz},
    {"gpsimd_elements_per_cycle", &CoreSpec::gpsimd_elements_per_cycle},
    {"hbm_gbytes_per_s", &CoreSpec::hbm_gbytes_per_s},
    {"host_link_gbytes_per_s", &CoreSpec::host_link_gbytes_per_s},
    {"kernel_launch_ns", &CoreSpec::kernel_launch_ns},
    {"copy_launch_ns", &CoreSpec::copy_launch_ns},
};

[[noreturn]] void bad(const std::string& origin, int line, const std::string& what) {
  throw Error(ErrorCode::kConfiguration,
              "engine model " + origin + (line > 0 ? ":" + std::to_string(line) : "") + ": " +
                  what + " (fix the file, or unset NRTSIM_ENGINE_MODEL to use the shipped one)");
}

std::mutex g_path_mutex;
std::string g_default_path;

}  // namespace

std::map<std::string, CoreSpec> parse_engine_model(const std::string& text,
                                                   const std::string& origin) {
  std::vector<IniSection> sections;
  try {
    // Engine model files allow a comment after a value ("2.4  # GHz").
    sections = parse_ini(text, IniSyntax{/*inline_comments=*/true});
  } catch (const IniError& e) {
    bad(origin, e.line(), e.what());
  }
  std::map<std::string, CoreSpec> chips;
  for (const IniSection& section : sections) {
    CoreSpec& spec = chips[section.name];
    for (const auto& [key, value] : section.entries) {
      if (key == "neuroncore") {
        spec.neuroncore = value.text;
        continue;
      }
      const Field* field = nullptr;
      for (const auto& f : kFields) {
        if (key == f.key) field = &f;
      }
      if (field == nullptr) bad(origin, value.line, "unknown key '" + key + "'");
      const auto number = parse_non_negative(value.text);
      if (!number) bad(origin, value.line, key + " = '" + value.text + "' is not a non-negative number");
      spec.*(field->number) = *number;
    }
    for (const auto& f : kFields) {
      if (section.find(f.key) == nullptr) {
        bad(origin, 0, "section [" + section.name + "] has no '" + f.key + "'");
      }
    }
  }
  return chips;
}

std::map<std::string, CoreSpec> load_engine_model(const std::string& path) {
  std::string text;
  try {
    text = read_ini_file(path);
  } catch (const IniError& e) {
    bad(path, 0, e.what());
  }
  return parse_engine_model(text, path);
}

void set_default_engine_model_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_path_mutex);
  g_default_path = path;
}

std::string default_engine_model_path() {
  if (auto path = env::get("NRTSIM_ENGINE_MODEL")) return *path;
  std::lock_guard<std::mutex> lock(g_path_mutex);
  return g_default_path;
}

CoreModel::CoreModel(const CoreSpec& spec, int lnc)
    : spec_(spec),
      lnc_(lnc),
      // GB/s is bytes per ns.
      hbm_bytes_per_ns_(spec.hbm_gbytes_per_s * lnc),
      host_link_bytes_per_ns_(spec.host_link_gbytes_per_s) {}

double CoreModel::tensor_flops_per_ns(Precision precision) const {
  // A multiply-accumulate is 2 FLOPs; GHz is cycles per ns.
  const double bf16 = 2.0 * spec_.tensor_macs_per_cycle * spec_.tensor_clock_ghz * lnc_;
  switch (precision) {
    case Precision::kFp8: return bf16 * spec_.tensor_fp8_speedup;
    case Precision::kBf16: return bf16;
    case Precision::kFp32: return bf16 / spec_.tensor_fp32_slowdown;
  }
  return bf16;
}

double CoreModel::elements_per_ns(Engine engine, Precision precision) const {
  const bool narrow = precision != Precision::kFp32;
  switch (engine) {
    case Engine::kVector:
      return (narrow ? spec_.vector_elements_per_cycle_16bit : spec_.vector_elements_per_cycle) *
             spec_.vector_clock_ghz * lnc_;
    case Engine::kScalar:
      return (narrow ? spec_.scalar_elements_per_cycle_16bit : spec_.scalar_elements_per_cycle) *
             spec_.scalar_clock_ghz * lnc_;
    case Engine::kGpSimd: return spec_.gpsimd_elements_per_cycle * spec_.gpsimd_clock_ghz * lnc_;
    case Engine::kTensor: return tensor_flops_per_ns(precision);
    case Engine::kDma: return hbm_bytes_per_ns_;
  }
  return 1;
}

double CoreModel::fixed_cost_ns(LaunchKind kind) const {
  switch (kind) {
    case LaunchKind::kCopyHostToDevice:
    case LaunchKind::kCopyDeviceToHost:
    case LaunchKind::kScalarRead:
      return spec_.copy_launch_ns;
    case LaunchKind::kHostFallback:
      return 0;  // host work: its time is the host's (LaunchRecord::host_*), not a device launch
    default:
      return spec_.kernel_launch_ns;
  }
}

std::array<double, kEngineCount> CoreModel::busy_ns(const Work& work, LaunchKind kind) const {
  std::array<double, kEngineCount> busy{};
  for (Engine e : {Engine::kTensor, Engine::kVector, Engine::kScalar, Engine::kGpSimd}) {
    const uint64_t ops = work[e].ops;
    if (ops != 0) busy[index_of(e)] = static_cast<double>(ops) / elements_per_ns(e, work.precision);
  }
  const bool over_host_link = kind == LaunchKind::kCopyHostToDevice ||
                              kind == LaunchKind::kCopyDeviceToHost ||
                              kind == LaunchKind::kScalarRead;
  const double bytes = static_cast<double>(work.bytes_read() + work.bytes_written());
  if (over_host_link) {
    // The host side of the transfer is not device HBM traffic: count the moved bytes once.
    const double moved = static_cast<double>(std::max(work.bytes_read(), work.bytes_written()));
    busy[index_of(Engine::kDma)] = moved / host_link_bytes_per_ns_;
  } else if (bytes != 0) {
    busy[index_of(Engine::kDma)] = bytes / hbm_bytes_per_ns_;
  }
  return busy;
}

double CoreModel::duration_ns(const std::array<double, kEngineCount>& busy,
                              LaunchKind kind) const {
  return fixed_cost_ns(kind) + *std::max_element(busy.begin(), busy.end());
}

}  // namespace nrtsim
