// What one rank's collective asks of the links, as its process group reports it on the launch
// record (Work::collective): the bytes it moves, how many ranks share the links, how many passes
// the collective makes. The runtime prices it (LinkModel.h: CoreLinks::collective_ns); the
// process group never computes a time. The estimate's projection states the collectives of a
// parallel layout in the same terms and has them priced by the same rule. Torch-free.
//
// For the process group, per verb (one rank of `ranks` on this host, `hosts` hosts, a buffer of
// B bytes, the whole all-gather output or reduce-scatter input; link_bytes the larger of what it
// sends and receives over NeuronLink):
//   all-reduce            passes 2, link_bytes 2 (ranks-1)/ranks B   (hierarchical_bytes below)
//   all-gather            passes 1, link_bytes (ranks-1)/ranks B     (hierarchical_bytes below)
//   reduce-scatter        passes 1, link_bytes (ranks-1)/ranks B     (hierarchical_bytes below)
//   broadcast, reduce     passes 1, link_bytes B on the root's host, (ranks-1)/ranks B on others
//   all-to-all            passes 1, link_bytes what it sends to (or receives from) the others
//   send, recv            point_to_point, link_bytes the message
#pragma once

#include <cstdint>

namespace nrtsim {

// One rank's bytes for a collective of `passes` passes (all-reduce 2: a reduce-scatter and an
// all-gather; all-gather or reduce-scatter 1) over a `buffer` of bytes, run hierarchically as
// Neuron's collectives and NCCL run it across hosts: inside each host among its `local` ranks on
// the whole buffer, between hosts on rails (local rank i of every host with local rank i of the
// others) on each rank's 1/local shard. Of `group` ranks, `local` are on this rank's host.
//
// Why the NeuronLink leg is (local-1)/local of the WHOLE buffer, not of this host's part: after
// an all-gather every rank holds all `group` parts; its rail brings it the (group-local)/local
// parts it is the host's carrier for (the EFA leg), so everything else it holds but did not start
// with, (local-1)/local of the buffer, comes over NeuronLink (the other hosts' parts included).
// A reduce-scatter is the mirror image; an all-reduce is one of each. Both the process group's
// verb table (transport/Verb.cpp) and the estimate's projection (cost/Collectives.cpp) state
// their bytes with this one function.
struct RankBytes {
  uint64_t link = 0;     // over NeuronLink (or through HBM) inside the host, each way
  uint64_t network = 0;  // over EFA between hosts, each way
};
RankBytes hierarchical_bytes(uint32_t passes, uint64_t buffer, uint64_t group, uint64_t local);

struct CollectiveTraffic {
  uint64_t buffer_bytes = 0;   // the collective's buffer (what chooses the algorithm)
  uint64_t link_bytes = 0;     // this rank's bytes over NeuronLink, the larger direction
  uint64_t network_bytes = 0;  // this rank's bytes between hosts (EFA), each way
  uint32_t passes = 0;         // reduce-scatter / all-gather passes: 2 for an all-reduce, 1 else
  uint32_t ranks = 0;          // ranks of the group on this host
  uint32_t hosts = 1;          // hosts the group spans
  bool point_to_point = false; // a send or receive: one direct transfer, no algorithm steps
  bool all_to_all = false;     // every rank sends each other its piece at once (a mesh pattern)
  // Where the group's ranks sit and what the caller's library runs. A process group reports
  // neither (its ranks are a host's consecutive cores, as torchrun's LOCAL_RANK places them; it
  // serves no engine); the estimate's projection states them for the strided groups of a
  // parallel layout.
  uint32_t ranks_per_chip = 0; // members of the group on each chip; 0: consecutive cores
  bool serving = false;        // a serving engine's all-reduce (one-/two-shot kernels on a switch)
};

}  // namespace nrtsim
