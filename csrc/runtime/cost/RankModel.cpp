#include "runtime/cost/RankModel.h"

#include <algorithm>

#include "runtime/Error.h"
#include "runtime/InstancePreset.h"

namespace nrtsim::cost {

namespace {

// TFLOP/s is 1e3 FLOP per ns; GB/s (1e9 bytes per second) is bytes per ns.
constexpr double kTflopsToPerNs = 1e3;

double gpu_tensor_tflops(const GpuSpec& g, Precision p) {
  switch (p) {
    case Precision::kFp8: return g.fp8_tflops;
    case Precision::kBf16: return g.bf16_tflops;
    // PyTorch's default FP32 matmul on CUDA does not use TF32 (allow_tf32 is off): CUDA cores.
    case Precision::kFp32: return g.vector_tflops;
  }
  return g.bf16_tflops;
}

}  // namespace

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all-reduce";
    case CollectiveKind::kAllGather: return "all-gather";
    case CollectiveKind::kReduceScatter: return "reduce-scatter";
    case CollectiveKind::kAllToAll: return "all-to-all";
    case CollectiveKind::kSend: return "send";
  }
  return "collective";
}

RankModel::RankModel(const InstanceSpec& instance, const CostData& data,
                     const std::map<std::string, CoreSpec>& chips) {
  if (instance.is_gpu()) {
    gpu_ = true;
    eff_ = data.gpu;
    gpu_spec_ = data.gpu_spec(instance.accelerator);
    peak_bf16_ = gpu_spec_.bf16_tflops * kTflopsToPerNs;
    hbm_capacity_ = gpu_spec_.hbm_gbytes * 1e9;
    hbm_bytes_per_ns_ = gpu_spec_.hbm_gbytes_per_s;
    return;
  }
  eff_ = data.trainium;
  // Chips, cores per chip, HBM per chip and the default LNC are the runtime's instance presets.
  const InstancePreset& preset = find_preset(instance.name);
  auto it = chips.find(instance.accelerator);
  if (it == chips.end()) {
    throw Error(ErrorCode::kConfiguration, "instance " + instance.name + " names accelerator '" +
                                               instance.accelerator +
                                               "', which the engine model file has no section for");
  }
  const int lnc = preset.chip.default_lnc;
  core_ = CoreModel(it->second, lnc);
  ranks_per_device_ = preset.chip.physical_cores / lnc;
  peak_bf16_ = core_.tensor_flops_per_ns(Precision::kBf16);
  hbm_capacity_ = static_cast<double>(preset.chip.hbm_bytes) / ranks_per_device_;
  hbm_bytes_per_ns_ = core_.hbm_bytes_per_ns();
}

std::array<double, kEngineCount> RankModel::busy_ns(const TracedOp& traced, bool fp8,
                                                    double weight_scale) const {
  Work w = traced.work;
  if (weight_scale != 1 && traced.weight_bytes_read > 0) {
    // Quantized weights: the op streams fewer bytes of them (its engine's reads shrink).
    EngineWork& reads = w[w.main_engine()];
    const double weights = static_cast<double>(std::min(traced.weight_bytes_read, reads.bytes_read));
    reads.bytes_read -= static_cast<uint64_t>(weights * (1 - weight_scale));
  }
  std::array<double, kEngineCount> busy{};
  const double tensor_ops = static_cast<double>(w[Engine::kTensor].ops);
  const double bytes = static_cast<double>(w.bytes_read() + w.bytes_written());
  const Precision precision =
      fp8 && tensor_ops > 0 && w.precision == Precision::kBf16 ? Precision::kFp8 : w.precision;
  if (gpu_) {
    busy[index_of(Engine::kTensor)] =
        tensor_ops / (gpu_tensor_tflops(gpu_spec_, precision) * kTflopsToPerNs * eff_.tensor);
    for (Engine e : {Engine::kVector, Engine::kScalar, Engine::kGpSimd}) {
      busy[index_of(e)] = static_cast<double>(w[e].ops) / (gpu_spec_.vector_tflops * kTflopsToPerNs);
    }
    busy[index_of(Engine::kDma)] = bytes / (hbm_bytes_per_ns_ * eff_.hbm);
    return busy;
  }
  busy = core_.busy_ns(w, traced.kind);
  // The Tensor engine is occupied by whole tiles, not by the useful FLOPs alone.
  const double occupied = std::max(tensor_ops, static_cast<double>(traced.tensor_tile_ops));
  busy[index_of(Engine::kTensor)] =
      occupied / (core_.tensor_flops_per_ns(precision) * eff_.tensor);
  busy[index_of(Engine::kDma)] /= eff_.hbm;
  return busy;
}

double RankModel::launch_ns(LaunchKind kind) const {
  if (gpu_) return kind == LaunchKind::kHostFallback ? 0 : gpu_spec_.kernel_launch_us * 1e3;
  return core_.fixed_cost_ns(kind);
}

double RankModel::instruction_overhead_ns(Engine engine) const {
  if (gpu_ || eff_.instruction_overhead_cycles <= 0) return 0;
  const CoreSpec& spec = core_.spec();
  switch (engine) {
    case Engine::kTensor: return eff_.instruction_overhead_cycles / spec.tensor_clock_ghz;
    case Engine::kVector: return eff_.instruction_overhead_cycles / spec.vector_clock_ghz;
    case Engine::kScalar: return eff_.instruction_overhead_cycles / spec.scalar_clock_ghz;
    case Engine::kGpSimd: return eff_.instruction_overhead_cycles / spec.gpsimd_clock_ghz;
    case Engine::kDma: return 0;  // descriptors are queued ahead, as the weight streams are
  }
  return 0;
}

}  // namespace nrtsim::cost
