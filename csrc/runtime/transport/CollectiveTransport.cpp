#include "runtime/transport/CollectiveTransport.h"

#include <utility>

#include "runtime/transport/Algorithms.h"

namespace nrtsim::transport {

std::unique_ptr<CollectiveTransport> CollectiveTransport::create(
    const std::string& name, int size, const TransportOptions& options,
    const std::function<void()>& created) {
  TransportOptions o = options;
  auto group = Rendezvous::create(name, size, o, created);
  return std::unique_ptr<CollectiveTransport>(new CollectiveTransport(std::move(group), o));
}

std::unique_ptr<CollectiveTransport> CollectiveTransport::join(const std::string& name, int rank,
                                                               int size,
                                                               const TransportOptions& options) {
  TransportOptions o = options;
  auto group = Rendezvous::join(name, rank, size, o);
  return std::unique_ptr<CollectiveTransport>(new CollectiveTransport(std::move(group), o));
}

CollectiveTransport::CollectiveTransport(std::unique_ptr<GroupSegment> group,
                                         const TransportOptions& options)
    : options_(options), group_(std::move(group)) {
  health_ = std::make_unique<Health>(*group_, options_.timeout);
  negotiated_ = Rendezvous::meet(*group_, options_);
  steps_ = std::make_unique<Lockstep>(*group_, *health_, negotiated_, options_.slot_bytes);
  p2p_ = std::make_unique<PointToPoint>(*group_, *health_);
}

void CollectiveTransport::set_timeout(std::chrono::milliseconds timeout) {
  options_.timeout = timeout;
  health_->set_timeout(timeout);
}

// A root outside the group would index past the slots and control blocks: refused before any
// rank touches the segment (every rank of a group checks the same root, so all refuse alike).
void CollectiveTransport::check_root(int root, const char* verb) const {
  if (root < 0 || root >= size()) {
    Health::fail(std::string(verb) + ": invalid root rank " + std::to_string(root) +
                 " (the group has ranks 0.." + std::to_string(size() - 1) + ")");
  }
}

void CollectiveTransport::barrier() { algorithms::barrier(*steps_); }

void CollectiveTransport::broadcast(void* data, size_t bytes, int root) {
  check_root(root, "broadcast");
  algorithms::broadcast(*steps_, data, bytes, root);
}

void CollectiveTransport::allreduce(void* data, size_t count, DType dtype, ReduceOp op) {
  algorithms::reduce(*steps_, data, count, dtype, op, -1);
}

void CollectiveTransport::reduce(void* data, size_t count, DType dtype, ReduceOp op, int root) {
  check_root(root, "reduce");
  algorithms::reduce(*steps_, data, count, dtype, op, root);
}

void CollectiveTransport::allgather(const void* in, void* const* outs, size_t bytes) {
  algorithms::gather(*steps_, in, outs, bytes, -1);
}

void CollectiveTransport::gather(const void* in, void* const* outs, size_t bytes, int root) {
  check_root(root, "gather");
  algorithms::gather(*steps_, in, outs, bytes, root);
}

void CollectiveTransport::scatter(const void* const* ins, void* out, size_t bytes, int root) {
  check_root(root, "scatter");
  algorithms::scatter(*steps_, ins, out, bytes, root);
}

void CollectiveTransport::reduce_scatter(const void* const* ins, void* out, size_t count,
                                         DType dtype, ReduceOp op) {
  algorithms::reduce_scatter(*steps_, ins, out, count, dtype, op);
}

void CollectiveTransport::alltoall(const void* const* ins, const size_t* send_bytes,
                                   void* const* outs, const size_t* recv_bytes) {
  algorithms::alltoall(*steps_, ins, send_bytes, outs, recv_bytes);
}

std::shared_ptr<P2pRequest> CollectiveTransport::post_send(int peer, uint64_t tag,
                                                           const void* data, size_t bytes) {
  health_->raise_if_aborted("send");
  return p2p_->post_send(peer, tag, data, bytes);
}

std::shared_ptr<P2pRequest> CollectiveTransport::post_recv(int peer, uint64_t tag, void* data,
                                                           size_t bytes) {
  health_->raise_if_aborted("recv");
  return p2p_->post_recv(peer, tag, data, bytes);
}

std::shared_ptr<P2pRequest> CollectiveTransport::post_recv_any(uint64_t tag, void* data,
                                                               size_t bytes) {
  health_->raise_if_aborted("recv");
  return p2p_->post_recv_any(tag, data, bytes);
}

}  // namespace nrtsim::transport
