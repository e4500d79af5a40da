// How long a collective takes on the links it crosses: the links of each Trainium generation
// (NeuronLink between the chips of an instance, EFA between instances) and the GPU rows' links
// (NVLink, InfiniBand), read by the runtime's one INI reader from one editable data file with
// its sources (torch_neuronx/data/neuron_links.ini, or the file NRTSIM_LINK_MODEL names), and THE
// rule that prices a collective from what it moves and the algorithm that moves it
// (CoreLinks::collective_ns). The simulated clock prices the collectives a process group reports
// with it (SimClock.h), and the estimate's projection the collectives of a parallel layout
// (cost/Collectives.h states them as CollectiveTraffic and calls it): one formula, so the same
// collective costs the same on both paths. Torch-free.
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
  // The fraction of gbytes_per_s a collective's transfers sustain (the data file says why).
  double efficiency = 1;
  // Neuron's runtime picks the algorithm by message size ([CC-INTRA]): below mesh_below_mbytes a
  // mesh (2 steps per pass whatever the group), below rdh_below_mbytes recursive
  // doubling-halving (1 + log2(chips) steps), above a ring. 0: rings only.
  double mesh_below_mbytes = 0;
  double rdh_below_mbytes = 0;
  // Above rdh_below_mbytes, a group that holds every rank of each of its chips (two or more) runs
  // KangaRing ([CC-INTRA]): the ranks of a chip pair up and only one of each pair joins the ring,
  // so a pass takes half the ring's steps. Other groups (one rank per chip) run the ring.
  bool kangaring = false;
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

enum class CollectiveAlgorithm : uint8_t { kRing, kMesh, kRecursiveDoubling, kDirect, kKangaRing };
const char* collective_algorithm_name(CollectiveAlgorithm algorithm);  // "ring", "mesh", ...

// The algorithm Neuron's runtime uses for a collective of `bytes` (the whole buffer) over `link`;
// `whole_chips`: the group holds every rank of each of its chips, and they pair up (KangaRing).
CollectiveAlgorithm algorithm_for(const LinkSpec& link, double bytes, bool whole_chips = false);
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
  // A device whose links are named directly: the estimate's instances, GPU rows included.
  // `switched`: the devices of an instance meet at a switch (NVSwitch) rather than on a torus;
  // `ranks_per_device` share its links and its `efa_gbits_per_s_per_device`.
  CoreLinks(const LinkSpec& scale_up, const LinkSpec& scale_out, bool switched,
            int ranks_per_device, double efa_gbits_per_s_per_device, double hbm_bytes_per_ns);

  // Modelled time of the collective, on the links alone (what launches or triggers it is the
  // caller's: a launch's fixed cost on the clock, a dependent step in a projected program):
  // bandwidth terms at the links' sustained rate plus one hop latency per algorithm step, inside
  // the chip (through HBM: each byte read and written), over NeuronLink between the chips of a
  // host, over EFA between hosts (the host's NICs shared by its cores); on a switch, the
  // algorithms of NCCL and of a serving engine's all-reduce. 0 for a group of one. Writes the
  // links and algorithm it used to `over` when given ("NeuronLink-v3 (mesh) + EFA").
  double collective_ns(const CollectiveTraffic& traffic, std::string* over = nullptr) const;

  double link_bytes_per_ns() const { return link_bytes_per_ns_; }
  double efa_bytes_per_ns() const { return efa_bytes_per_ns_; }
  const LinkSpec& scale_up() const { return scale_up_; }
  const LinkSpec& scale_out() const { return scale_out_; }
  int cores_per_chip() const { return cores_per_chip_; }
  bool known() const { return cores_per_chip_ > 0; }

 private:
  double torus_ns(const CollectiveTraffic& t, int ranks, std::string& used) const;
  double switch_ns(const CollectiveTraffic& t, int ranks, std::string& used) const;

  LinkSpec scale_up_, scale_out_;
  bool switched_ = false;
  int cores_per_chip_ = 0;
  double link_bytes_per_ns_ = 0;   // this core's share of its chip's NeuronLink, per direction, sustained
  double efa_bytes_per_ns_ = 0;    // this core's share of its chip's EFA, each way, sustained
  double hbm_bytes_per_ns_ = 0;
};

}  // namespace nrtsim
