// The projection's data beyond the per-core engine model: GPUs, links, instances with prices,
// and the efficiency assumptions, read from an editable INI file
// (torch_neuronx/data/estimate.ini) in which every value names its source.
#pragma once

#include <map>
#include <string>

namespace nrtsim::cost {

// The fraction of a datasheet peak that sustained work reaches, per device family.
struct Efficiency {
  double tensor = 1;
  double hbm = 1;
  double link = 1;
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
  std::string tensor_source, hbm_source, link_source, op_latency_source, host_step_source;
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

struct LinkSpec {
  std::string name;
  double gbytes_per_s = 0;  // per device, per direction
  double hop_latency_us = 0;
  // The runtime's algorithm by message size (Neuron's intra-node collectives): below
  // mesh_below_mbytes a mesh (2 steps per reduce-scatter or all-gather, whatever the group
  // size), below rdh_below_mbytes recursive doubling-halving (log2 steps), above a ring.
  // 0: rings only.
  double mesh_below_mbytes = 0;
  double rdh_below_mbytes = 0;
  // NVSwitch: a serving engine's all-reduce reads every peer's buffer in one step below
  // one_shot_below_mbytes and reduce-scatters then all-gathers in two below
  // two_shot_below_mbytes (TensorRT-LLM's custom all-reduce); above, NCCL. multicast: the switch
  // reduces in the network (NVLink SHARP), so an all-reduce moves each byte once each way.
  double one_shot_below_mbytes = 0;
  double two_shot_below_mbytes = 0;
  bool multicast = false;
  std::string source;
};

struct InstanceSpec {
  std::string name;
  std::string accelerator;  // "Trainium2" (neuron_cores.ini) or "H100" (a gpu section)
  int devices = 0;          // chips or GPUs
  bool torus = false;       // scale-up torus (Trainium) or switch (NVSwitch)
  int torus_x = 1, torus_y = 1;
  std::string scale_up, scale_out;
  double efa_gbits_per_s = 0;
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
// missing key, or an instance that names an unknown link.
CostData parse_cost_data(const std::string& text, const std::string& origin);
CostData load_cost_data(const std::string& path);

}  // namespace nrtsim::cost
