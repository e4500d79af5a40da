// The projection's data beyond the per-core engine model: GPUs, instances with prices, and the
// efficiency assumptions, read from an editable INI file (torch_neuronx/data/estimate.ini) in
// which every value names its source; and the links, which are the runtime's link model's
// (LinkModel.h, torch_neuronx/data/neuron_links.ini): a Trainium instance's links and EFA
// bandwidth are its generation's, stated once there.
#pragma once

#include <map>
#include <string>

#include "runtime/LinkModel.h"

namespace nrtsim::cost {

// The fraction of a datasheet peak that sustained work reaches, per device family.
struct Efficiency {
  double tensor = 1;
  double hbm = 1;
  // (A link's efficiency is the link model's: LinkSpec::efficiency, neuron_links.ini.)
  // Fixed latency of one dependent step inside a compiled program: an op whose input is the
  // previous op's output waits for its first tile to arrive (a DMA start on a NeuronCore, a
  // kernel boundary on a GPU); also the trigger and completion of each collective.
  double op_latency_us = 0;
  // Static overhead of one engine instruction, in that engine's cycles: a small op that waits
  // for the one before it pays it in full (0: none modelled).
  double instruction_overhead_cycles = 0;
  // A serving loop that waits for each step's result before preparing the next (no asynchronous
  // runtime or scheduling) leaves the device idle this long per step: sampling read back,
  // scheduling, the next step's inputs, the launch. 0: none modelled.
  double host_step_us = 0;
  // Whether the backward's tensor-parallel collectives (input gradients) run beside the
  // weight-gradient matmuls (Megatron-LM's asynchronous TP all-reduce) or block like the forward's.
  bool tp_backward_overlap = true;
  std::string tensor_source, hbm_source, op_latency_source, host_step_source;
};

struct GpuSpec {
  std::string key;   // "H100"
  std::string name;  // "H100 SXM5"
  double bf16_tflops = 0;
  double fp8_tflops = 0;
  double tf32_tflops = 0;
  double vector_tflops = 0;
  double hbm_gbytes = 0;
  double hbm_gbytes_per_s = 0;
  double kernel_launch_us = 0;
  std::string source;
};

using LinkSpec = nrtsim::LinkSpec;

struct InstanceSpec {
  std::string name;
  std::string accelerator;  // "Trainium2" (neuron_cores.ini) or "H100" (a gpu section)
  int devices = 0;          // chips or GPUs
  bool torus = false;       // scale-up torus (Trainium) or switch (NVSwitch)
  int torus_x = 1, torus_y = 1;
  std::string scale_up, scale_out;  // links of the link model
  double efa_gbits_per_s = 0;       // the instance's (a Trainium one: its chips' per the link model)
  double price_usd_per_hour = 0;  // 0: none known
  std::string price_source;

  bool is_gpu() const { return !torus; }
};

struct CostData {
  std::map<std::string, GpuSpec> gpus;
  std::map<std::string, LinkSpec> links;
  std::map<std::string, InstanceSpec> instances;
  Efficiency trainium, gpu;

  // Throw Error(kConfiguration) naming the known names.
  const InstanceSpec& instance(const std::string& name) const;
  const GpuSpec& gpu_spec(const std::string& key) const;
  const LinkSpec& link(const std::string& name) const;
};

// Throws Error(kConfiguration) naming the file, line and key for anything it cannot read, a
// missing key, an instance that names an unknown link, or a link figure stated here instead of in
// the link model.
CostData parse_cost_data(const std::string& text, const std::string& origin,
                         const nrtsim::LinkModel& links);
// With the link model of default_link_model_path() (LinkModel.h).
CostData load_cost_data(const std::string& path);

}  // namespace nrtsim::cost
