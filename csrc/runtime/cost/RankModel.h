// One rank of an instance as the projection prices it: a Trainium logical core is the engine
// model of neuron_cores.ini (the simulated clock's own CoreModel) with the tile occupancy of its
// Tensor engine; a GPU is a roofline (tensor cores by number format, CUDA cores, HBM).
#pragma once

#include <array>
#include <map>
#include <string>

#include "runtime/Engine.h"
#include "runtime/EngineModel.h"
#include "runtime/cost/CostData.h"
#include "runtime/cost/TracedOp.h"

namespace nrtsim::cost {

// How long one op (or anything with a Work) takes on one rank of an instance.
class RankModel {
 public:
  RankModel(const InstanceSpec& instance, const CostData& data,
            const std::map<std::string, CoreSpec>& chips);

  // `fp8`: a 16-bit matmul runs at the FP8 rate (FP8 training casts its GEMM inputs).
  // `weight_scale`: stored over traced bytes of the op's weight reads (quantized weights).
  std::array<double, kEngineCount> busy_ns(const TracedOp& op, bool fp8 = false,
                                           double weight_scale = 1) const;
  double launch_ns(LaunchKind kind) const;
  // The static overhead of one instruction on `engine` (0 on a GPU, where a compiled program fuses
  // elementwise work into its neighbours' kernels).
  double instruction_overhead_ns(Engine engine) const;
  double peak_bf16_flops_per_ns() const { return peak_bf16_; }
  double hbm_capacity_bytes() const { return hbm_capacity_; }
  double hbm_bytes_per_ns() const { return hbm_bytes_per_ns_; }
  int ranks_per_device() const { return ranks_per_device_; }
  bool gpu() const { return gpu_; }
  const Efficiency& efficiency() const { return eff_; }

 private:
  bool gpu_ = false;
  Efficiency eff_;
  CoreModel core_;
  GpuSpec gpu_spec_;
  int ranks_per_device_ = 1;
  double peak_bf16_ = 0;
  double hbm_capacity_ = 0;
  double hbm_bytes_per_ns_ = 0;
};

}  // namespace nrtsim::cost
