// How long work takes on a NeuronCore: the per-engine rates and fixed costs of each Trainium
// generation, read from an editable data file (torch_neuronx/data/neuron_cores.ini), and the
// model that turns a launch's work into engine busy times and a duration.
#pragma once

#include <array>
#include <map>
#include <string>

#include "runtime/Engine.h"
#include "runtime/LaunchRecord.h"
#include "runtime/TensorTiles.h"

namespace nrtsim {

// One physical NeuronCore's figures, as the data file states them.
struct CoreSpec {
  std::string neuroncore;  // "v3"
  double tensor_clock_ghz = 0;
  double tensor_macs_per_cycle = 0;
  double tensor_fp8_speedup = 1;
  double tensor_fp32_slowdown = 1;
  double vector_clock_ghz = 0;
  double vector_elements_per_cycle_16bit = 0;
  double vector_elements_per_cycle = 0;
  double scalar_clock_ghz = 0;
  double scalar_elements_per_cycle_16bit = 0;
  double scalar_elements_per_cycle = 0;
  double gpsimd_clock_ghz = 0;
  double gpsimd_elements_per_cycle = 0;
  double hbm_gbytes_per_s = 0;
  double host_link_gbytes_per_s = 0;
  double kernel_launch_ns = 0;
  double copy_launch_ns = 0;
  TensorTiles tiles;  // the tensor_* / sbuf_* / psum_* keys
};

// Chip name ("Trainium2") -> its core's figures. Throws Error(kConfiguration) naming the file,
// line and key for anything it cannot read, and for a section missing a key.
std::map<std::string, CoreSpec> parse_engine_model(const std::string& text,
                                                   const std::string& origin);
std::map<std::string, CoreSpec> load_engine_model(const std::string& path);

// The file the process default runtime reads: NRTSIM_ENGINE_MODEL if set, else the path given
// here (the Python package sets its installed data file at import), else "" (an error at init).
void set_default_engine_model_path(const std::string& path);
std::string default_engine_model_path();

// One logical core: the rates of `lnc` physical cores of `spec`.
class CoreModel {
 public:
  CoreModel() = default;
  CoreModel(const CoreSpec& spec, int lnc);

  // FLOPs per ns of the Tensor engine at `precision`; elements per ns of the other engines for
  // 16-bit or wider data.
  double tensor_flops_per_ns(Precision precision) const;
  double elements_per_ns(Engine engine, Precision precision) const;
  double hbm_bytes_per_ns() const { return hbm_bytes_per_ns_; }
  double host_link_bytes_per_ns() const { return host_link_bytes_per_ns_; }
  double fixed_cost_ns(LaunchKind kind) const;

  // Modelled occupation of each engine by `work`. Arithmetic occupies the engine that does it;
  // the bytes kernels read and write, and the bytes copies move, occupy the DMA queues (over the
  // host link for host <-> device copies, over HBM otherwise).
  std::array<double, kEngineCount> busy_ns(const Work& work, LaunchKind kind) const;
  // The fixed cost plus the busiest engine: engines work in parallel within one launch.
  double duration_ns(const std::array<double, kEngineCount>& busy, LaunchKind kind) const;

  const CoreSpec& spec() const { return spec_; }
  // One physical core's tiles: a logical core of several runs its tiles on each of them.
  const TensorTiles& tiles() const { return spec_.tiles; }
  int lnc() const { return lnc_; }

 private:
  CoreSpec spec_;
  int lnc_ = 1;
  double hbm_bytes_per_ns_ = 0;
  double host_link_bytes_per_ns_ = 0;
};

}  // namespace nrtsim
