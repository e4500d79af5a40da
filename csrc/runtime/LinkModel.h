// How long a collective takes on the links it crosses: the links of each Trainium generation
// (NeuronLink between the chips of an instance, EFA between instances) and the GPU rows' links
// (NVLink, InfiniBand), read by the runtime's one INI reader from one editable data file with
// its sources (torch_neuronx/data/neuron_links.ini, or the file NRTSIM_LINK_MODEL names), and the
// rule that prices a collective from what it moves and the algorithm that moves it. The
// simulated clock prices the collectives a process group reports with it (SimClock.h), and the
// estimate's projection the collectives of a parallel layout (cost/Projection.h). Torch-free.
//
// The seam with a process group: it reports a CollectiveTraffic on its launch record's Work (the
// bytes one rank moves over NeuronLink and between hosts, how many ranks share them, how many
// passes the collective makes); the runtime picks the algorithm Neuron's runtime would and
// prices the record. The process group never computes a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "runtime/CollectiveTraffic.h"

namespace nrtsim {

struct LinkSpec {
  std::string name;              // "NeuronLink-v3"
  double gbytes_per_s = 0;       // per device (chip or GPU), per direction; 0: see the chip
  double hop_latency_us = 0;     // one step of a collective algorithm between neighbours
  // Neuron's runtime picks the algorithm by message size ([CC-INTRA]): below mesh_below_mbytes a
  // mesh (2 steps per pass whatever the group), below rdh_below_mbytes recursive
  // doubling-halving (1 + log2(chips) steps), above a ring. 0: rings only.
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

// The links of one Trainium generation's instances (a chip section of neuron_cores.ini).
struct ChipLinks {
  std::string chip;                     // "Trainium2"
  std::string scale_up;                 // a link: "NeuronLink-v3"
  std::string scale_out;                // a link: "EFA"
  double efa_gbits_per_s_per_chip = 0;  // the instance's EFA bandwidth over its chips
  std::string source;
};

struct LinkModel {
  std::map<std::string, LinkSpec> links;
  std::map<std::string, ChipLinks> chips;

  // Throw Error(kConfiguration) naming the known names.
  const LinkSpec& link(const std::string& name) const;
  const ChipLinks& chip(const std::string& name) const;
};

// Throws Error(kConfiguration) naming the file, line and key for anything it cannot read, a
// missing key, or a chip that names an unknown link.
LinkModel parse_link_model(const std::string& text, const std::string& origin);
LinkModel load_link_model(const std::string& path);

// The file the process default runtime reads: NRTSIM_LINK_MODEL if set, else the path given here
// (the Python package sets its installed data file at import), else "".
void set_default_link_model_path(const std::string& path);
std::string default_link_model_path();

enum class CollectiveAlgorithm : uint8_t { kRing, kMesh, kRecursiveDoubling, kDirect };
const char* collective_algorithm_name(CollectiveAlgorithm algorithm);  // "ring", "mesh", ...

// The algorithm Neuron's runtime uses for a collective of `bytes` (the whole buffer) over `link`.
CollectiveAlgorithm algorithm_for(const LinkSpec& link, double bytes);
// Dependent steps of one pass (a reduce-scatter or an all-gather) of `algorithm` among `members`
// over `devices` devices (chips or GPUs).
double steps_per_pass(CollectiveAlgorithm algorithm, int members, int devices);

// One logical core's view of its links: what the simulated clock prices collectives with.
class CoreLinks {
 public:
  CoreLinks() = default;
  // `cores_per_chip`: logical cores per chip (their collectives share the chip's links);
  // `hbm_bytes_per_ns`: the core's HBM rate (a group inside one chip moves through HBM).
  CoreLinks(const LinkModel& model, const std::string& chip, int cores_per_chip,
            double hbm_bytes_per_ns);

  // Modelled time of the collective: bandwidth terms plus one hop latency per algorithm step,
  // inside the chip (through HBM: each byte read and written), over NeuronLink between the
  // chips of a host (ranks on consecutive cores, as torchrun's LOCAL_RANK places them), over EFA
  // between hosts (the host's NICs shared by its cores). 0 for a group of one.
  double collective_ns(const CollectiveTraffic& traffic) const;

  double link_bytes_per_ns() const { return link_bytes_per_ns_; }
  double efa_bytes_per_ns() const { return efa_bytes_per_ns_; }
  const LinkSpec& scale_up() const { return scale_up_; }
  const LinkSpec& scale_out() const { return scale_out_; }
  int cores_per_chip() const { return cores_per_chip_; }
  bool known() const { return cores_per_chip_ > 0; }

 private:
  LinkSpec scale_up_, scale_out_;
  int cores_per_chip_ = 0;
  double link_bytes_per_ns_ = 0;   // this core's share of its chip's NeuronLink, per direction
  double efa_bytes_per_ns_ = 0;    // this core's share of its chip's EFA, each way
  double hbm_bytes_per_ns_ = 0;
};

}  // namespace nrtsim
