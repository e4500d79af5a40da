// What one rank's collective asks of the links, as its process group reports it on the launch
// record (Work::collective): the bytes it moves, how many ranks share the links, how many passes
// the collective makes. The runtime prices it (LinkModel.h: CoreLinks::collective_ns); the
// process group never computes a time. The estimate's projection states the collectives of a
// parallel layout in the same terms and has them priced by the same rule. Torch-free.
//
// For the process group, per verb (one rank of `ranks` on this host, `hosts` hosts, a buffer of
// B bytes; link_bytes the larger of what it sends and receives over NeuronLink):
//   all-reduce            passes 2, link_bytes 2 (ranks-1)/ranks B
//   all-gather            passes 1, link_bytes (ranks-1) x its input
//   reduce-scatter        passes 1, link_bytes (ranks-1) x its output
//   broadcast, reduce     passes 1, link_bytes B on the ranks that send or receive it
//   all-to-all            passes 1, link_bytes what it sends to (or receives from) the others
//   send, recv            point_to_point, link_bytes the message
#pragma once

#include <cstdint>

namespace nrtsim {

struct CollectiveTraffic {
  uint64_t buffer_bytes = 0;   // the collective's buffer (what chooses the algorithm)
  uint64_t link_bytes = 0;     // this rank's bytes over NeuronLink, the larger direction
  uint64_t network_bytes = 0;  // this rank's bytes between hosts (EFA), each way
  uint32_t passes = 0;         // reduce-scatter / all-gather passes: 2 for an all-reduce, 1 else
  uint32_t ranks = 0;          // ranks of the group on this host
  uint32_t hosts = 1;          // hosts the group spans
  bool point_to_point = false; // a send or receive: one direct transfer, no algorithm steps
  // Where the group's ranks sit and what the caller's library runs. A process group reports none
  // of these (its ranks are a host's consecutive cores, as torchrun's LOCAL_RANK places them);
  // the estimate's projection states them for the strided groups of a parallel layout.
  uint32_t ranks_per_chip = 0; // members of the group on each chip; 0: consecutive cores
  bool all_to_all = false;     // every rank sends each other its piece at once (a mesh pattern)
  bool serving = false;        // a serving engine's all-reduce (one-/two-shot kernels on a switch)
};

}  // namespace nrtsim
