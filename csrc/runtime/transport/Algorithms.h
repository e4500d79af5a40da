// The collective algorithms of one host's group, one file each (Allreduce.cpp, Broadcast.cpp,
// Allgather.cpp, Scatter.cpp, ReduceScatter.cpp, Alltoall.cpp), all on the Lockstep machinery.
// Each has two paths: through the slots (any buffer: private memory, CPU tensors) and straight
// between the ranks' buffers when every buffer the peers read is in mapped device memory (from
// TransportOptions::mapped_min_bytes). Both give the same bits: reductions combine in rank order
// on every path.
//
// On the mapped path a rank reads its peers' buffers and writes only its own; a collective's
// closing barrier keeps any rank from returning (and letting its caller reuse a buffer) while a
// peer may still read it.
#pragma once

#include <cstddef>

#include "runtime/transport/Lockstep.h"

namespace nrtsim::transport::algorithms {

void barrier(Lockstep& g);
void broadcast(Lockstep& g, void* data, size_t bytes, int root);
// root < 0: every rank gets the result (allreduce); otherwise only the root's data changes.
void reduce(Lockstep& g, void* data, size_t count, DType dtype, ReduceOp op, int root);
// outs[r] receives rank r's `bytes` bytes: on every rank (root < 0), or on the root only.
void gather(Lockstep& g, const void* in, void* const* outs, size_t bytes, int root);
void scatter(Lockstep& g, const void* const* ins, void* out, size_t bytes, int root);
void reduce_scatter(Lockstep& g, const void* const* ins, void* out, size_t count, DType dtype,
                    ReduceOp op);
void alltoall(Lockstep& g, const void* const* ins, const size_t* send_bytes, void* const* outs,
              const size_t* recv_bytes);

}  // namespace nrtsim::transport::algorithms
