// nki.collectives inside a kernel: the collective instruction (Opcode::kCollective) of a rank of
// an SPMD job, where every rank runs the same kernel. The interpreter stops at the instruction,
// stages this rank's tile into contiguous bytes, and hands the exchange with the other ranks to
// a hook its host provides (the nki package's, over torch.distributed's process groups); then it
// writes what came back into the destination view. The runtime moves no bytes between ranks
// itself and knows nothing of process groups: the hook does. Torch-free.
//
// The instruction's fields (the nki front end writes them, nki/collectives.py):
//   axes   the CollectiveKind
//   a      this rank's source view; c the second source of an implicit permute-reduce
//   dst    the destination view
//   d      all_to_all_v's / all_gather_v's uint32 metadata (rows send counts, send
//          displacements, recv counts[, recv displacements] by group rank): read, and row 2
//          written unless recv counts are known
//   alu0   the reduction (add, max, min) of all_reduce, reduce_scatter and the permute-reduce
//   imm0   the ranks that move the call's bytes with this one (its sub-group; for a permute,
//          this rank and its peers): 1 costs nothing on the links
//   imm1   the call's number in the kernel: the parts of one coalesced call share it
//   imm2   how many of those ranks share this rank's host (the rest are on other hosts, in
//          blocks of as many: the EFA leg of the link model)
//   text   the front end's description of the call (replica group, pairs, dims, flags), which
//          only the hook reads
//
// Time (Timeline.cpp): the call's bytes by the transport's verb table (transport/Verb.h) and the
// runtime's link model (LinkModel.h: CoreLinks::collective_ns), the same rule that prices a
// torch.distributed collective of the "neuron" process group; the DMA queues of the core are
// busy for that time, as the hardware's collective DMA rings drive the links.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/nki/Program.h"

namespace nrtsim {
class CoreLinks;
}

namespace nrtsim::nki {

enum class CollectiveKind : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kAllToAllV,
  kPermute,                // explicit (source, target) pairs
  kPermuteImplicit,        // a ring: send to the successor, receive from the predecessor
  kPermuteImplicitReduce,  // the ring, sending op(a, c)
  kAllGatherV,             // one flat chunk to every rank, by all_gather_v's metadata rows
};
const char* collective_kind_name(CollectiveKind kind);

// A tile as contiguous bytes in the order of its view (row-major over the view's dims).
struct StagedTile {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct CollectiveExchange {
  const Instruction* instruction = nullptr;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  StagedTile send;      // this rank's contribution (a permute-reduce's op(a, c), in dst's dtype)
  StagedTile receive;   // starts as the destination's contents; the hook writes what arrives
  StagedTile metadata;  // all_to_all_v's metadata (empty otherwise); written back after the hook
};

// Runs the exchange with the other ranks; throws to stop the kernel (every rank reaches the
// same collective instructions in the same order, so a hook may create process groups there).
using CollectiveHook = std::function<void(CollectiveExchange&)>;

// Executes collective instruction `index` of `p` over the buffers at `base` (one per buffer of
// the program). Without a hook, throws Error(kInvalidArgument) saying what to provide.
void run_collective(const Program& p, size_t index, const std::vector<uint8_t*>& base,
                    const CollectiveHook* hook);

// Modelled time of the collective call that instruction `index` starts (its parts are the
// following instructions with the same call number), on `links`; 0 for a group of one rank.
// Without links a collective of several ranks throws Error(kConfiguration).
double collective_call_ns(const Program& p, size_t index, const CoreLinks* links);

}  // namespace nrtsim::nki
