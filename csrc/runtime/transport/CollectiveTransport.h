// The simulated NeuronLink of one host: the collectives and point-to-point messages of one
// process group whose ranks are processes on this host, carried through one shared-memory
// segment and the ranks' device memory. Torch-free: it moves and reduces raw buffers (device
// memory is host memory in nrtsim); the backend layer turns tensors into buffers and carries the
// segment's name through the c10d Store.
//
// It is the sum of its units, each with its own tests (tests/runtime/transport):
//   GroupSegment   the segment's layout: header, a control block per rank, slots, rings
//   Rendezvous     creating and joining the segment; what the group can use (mapped memory)
//   Health         every wait: dead, hung and aborted peers become errors, never hangs
//   Lockstep       the steps of a collective, descriptor checks, published buffers
//   Algorithms     one file per collective, each with a slot path and a mapped path
//   PointToPoint   send/recv rings, any-source receives
// and the verb table (Verb.h) that the backend and the link model share.
//
// Security: no rank widens who may trace it. Peers reach each other's device memory only
// through file descriptors (PeerHbm.h: the memory file opened read-only through
// /proc/<pid>/fd), never by cross-memory attach (process_vm_readv, which needs the right to
// attach, i.e. PR_SET_PTRACER under Yama); a rank writes only its own memory.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/transport/Health.h"
#include "runtime/transport/Lockstep.h"
#include "runtime/transport/PeerHbm.h"
#include "runtime/transport/PointToPoint.h"
#include "runtime/transport/Reduce.h"
#include "runtime/transport/Rendezvous.h"
#include "runtime/transport/ShmSegment.h"
#include "runtime/transport/Verb.h"

namespace nrtsim::transport {

class CollectiveTransport {
 public:
  // Rank 0 creates the segment `name` and then calls `created` (where it publishes the name);
  // the others join it once rank 0 has published the name. Both return when every rank has
  // mapped the segment and the group has agreed on what it can use.
  static std::unique_ptr<CollectiveTransport> create(
      const std::string& name, int size, const TransportOptions& options,
      const std::function<void()>& created = {});
  static std::unique_ptr<CollectiveTransport> join(const std::string& name, int rank, int size,
                                                   const TransportOptions& options);
  CollectiveTransport(const CollectiveTransport&) = delete;
  CollectiveTransport& operator=(const CollectiveTransport&) = delete;

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  const TransportOptions& options() const { return options_; }
  void set_timeout(std::chrono::milliseconds timeout);
  // Whether the ranks have mapped each other's device memory, and if not, why not.
  bool mapped_hbm() const { return negotiated_.mapped; }
  const std::string& mapped_hbm_status() const { return negotiated_.mapped_status; }
  // Collectives so far that moved every buffer through mapped device memory.
  uint64_t mapped_ops() const { return steps_->mapped_ops(); }

  void barrier();
  void broadcast(void* data, size_t bytes, int root);
  void allreduce(void* data, size_t count, DType dtype, ReduceOp op);
  // Only `root`'s data receives the result; the others' stays as it was.
  void reduce(void* data, size_t count, DType dtype, ReduceOp op, int root);
  // outs[r] receives rank r's `bytes` bytes.
  void allgather(const void* in, void* const* outs, size_t bytes);
  void gather(const void* in, void* const* outs, size_t bytes, int root);  // outs: root only
  void scatter(const void* const* ins, void* out, size_t bytes, int root);  // ins: root only
  // out = op over ranks of ins[rank()] of every rank; ins[r] has `count` elements.
  void reduce_scatter(const void* const* ins, void* out, size_t count, DType dtype, ReduceOp op);
  // ins[r] (send_bytes[r]) goes to rank r, outs[r] (recv_bytes[r]) comes from rank r. Sizes
  // may differ per pair; every rank's recv_bytes[s] must equal rank s's send_bytes[me].
  void alltoall(const void* const* ins, const size_t* send_bytes, void* const* outs,
                const size_t* recv_bytes);

  // Point to point (PointToPoint.h).
  std::shared_ptr<P2pRequest> post_send(int peer, uint64_t tag, const void* data, size_t bytes);
  std::shared_ptr<P2pRequest> post_recv(int peer, uint64_t tag, void* data, size_t bytes);
  std::shared_ptr<P2pRequest> post_recv_any(uint64_t tag, void* data, size_t bytes);
  void wait(P2pRequest& request) { p2p_->wait(request); }
  bool test(P2pRequest& request) { return p2p_->test(request); }

  // Makes every rank's current and future waits fail with `reason` (this rank named as the
  // source). Idempotent.
  void abort(const std::string& reason) { health_->abort(reason); }
  bool aborted() const { return health_->aborted(); }

 private:
  CollectiveTransport(std::unique_ptr<GroupSegment> group, const TransportOptions& options);
  void check_root(int root, const char* verb) const;

  TransportOptions options_;
  std::unique_ptr<GroupSegment> group_;
  std::unique_ptr<Health> health_;
  Negotiated negotiated_;
  std::unique_ptr<Lockstep> steps_;
  std::unique_ptr<PointToPoint> p2p_;
};

}  // namespace nrtsim::transport
