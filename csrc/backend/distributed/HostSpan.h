// The part of a "neuron" process group that crosses hosts. A group whose ranks are on several
// hosts runs its collectives hierarchically: the ranks of one host keep the shared-memory
// transport among themselves (the simulated NeuronLink, one CollectiveTransport per host), and the
// host leaders (the lowest group rank of each host) carry the inter-host leg over Gloo, the engine
// that ships with PyTorch (a c10d ProcessGroupGloo over a PrefixStore of the group's store).
// Operations without a hierarchical form here (gather, scatter, all-to-all, send/recv between
// hosts) use a second, flat Gloo group over all ranks of the group.
//
// What counts as one host is the set of processes that can share the transport: the same kernel
// boot (/proc/sys/kernel/random/boot_id), network namespace and PID namespace (the transport's
// segment is opened through /proc/<pid>/fd and its peers are watched by pid). So two network
// namespaces of one machine are two hosts, as two machines are. NRTSIM_HOST_ID overrides it.
//
// Torch types, no Python: the Gloo groups come from a factory the Python layer installs (torch
// ships ProcessGroupGloo.hpp without Gloo's own headers, so C++ outside libtorch cannot construct
// one; the Python binding of torch can, on the interface that reaches the other hosts).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/distributed/Exchange.h"
#include "runtime/transport/CollectiveTransport.h"
#include "runtime/transport/Verb.h"

namespace torch_neuronx::distributed {

// Identity of this process's host (see above) and a name for messages (the hostname).
std::string host_identity();
std::string host_display_name();

// Which rank of the group is on which host; hosts are numbered in the order of their lowest rank.
struct HostLayout {
  std::vector<int> host_of;                 // per group rank
  std::vector<std::vector<int>> ranks_of;   // per host, group ranks ascending
  std::vector<std::string> names;           // per host, for messages
  int rank = 0;
  int host = 0;         // this rank's host
  int local_rank = 0;   // index in ranks_of[host]
  int hosts() const { return static_cast<int>(ranks_of.size()); }
  int local_size() const { return static_cast<int>(ranks_of[host].size()); }
  bool leader() const { return local_rank == 0; }
  bool local(int r) const { return host_of[r] == host; }
  int local_index(int r) const;  // r's index among its host's ranks

  // Collective over the group: every rank publishes its host identity in `store` and reads
  // everyone's (the group's timeout bounds the wait; group rank 0 of 8 or more ranks reports
  // progress).
  static HostLayout discover(c10d::Store& store, int rank, int size,
                             std::chrono::milliseconds timeout);
};

// Builds a Gloo process group (store, rank, size, timeout); installed by the Python layer.
using GlooFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
    const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds)>;
void set_gloo_factory(GlooFactory factory);

class HostSpan {
 public:
  // Collective over the group: the leaders' and the flat Gloo groups rendezvous through `store`.
  HostSpan(const c10::intrusive_ptr<c10d::Store>& store, HostLayout layout,
           nrtsim::transport::CollectiveTransport& local, std::chrono::milliseconds timeout);
  ~HostSpan();

  const HostLayout& layout() const { return layout_; }
  void set_timeout(std::chrono::milliseconds timeout);
  // Makes this rank's later calls fail with `reason`, aborts the host's transport and closes the
  // Gloo connections, so that ranks on other hosts blocked on this one fail at once too.
  void abort(const std::string& reason);

  // The collectives, on contiguous CPU tensors (host views of neuron memory). `op` is the
  // transport's reduction (SUM for AVG and PREMUL_SUM: the caller scales afterwards).
  void allreduce(at::Tensor& x, nrtsim::transport::DType dtype, nrtsim::transport::ReduceOp op);
  void reduce(at::Tensor& x, nrtsim::transport::DType dtype, nrtsim::transport::ReduceOp op,
              int root);
  void broadcast(at::Tensor& x, int root);
  // out: size x in.numel() elements, in group rank order.
  void allgather(const at::Tensor& in, at::Tensor& out);
  // in: size x out.numel() elements; out receives this rank's share of the reduction.
  void reduce_scatter(const at::Tensor& in, at::Tensor& out, nrtsim::transport::DType dtype,
                      nrtsim::transport::ReduceOp op);
  void barrier();

  // Runs one exchange of a c10d call (Exchange.h) across the hosts: the hierarchical verbs
  // above, and gather, scatter and all-to-all on the flat Gloo group.
  void exchange(Exchange& x);

  // The flat Gloo group over all ranks (gather, scatter, all-to-all, send/recv between hosts).
  // Throws if the group failed or was aborted.
  c10d::Backend& flat();
  // Waits for a Gloo work; a failure aborts the span (see abort) and throws DistBackendError.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what);

 private:
  c10d::Backend& leaders();
  void check_usable();
  void allreduce_leaders(nrtsim::transport::Verb verb, at::Tensor& x,
                         nrtsim::transport::DType dtype, nrtsim::transport::ReduceOp op);
  // Leaders only: every host's leader states what its host is about to do (the collective, its
  // element type and size, root or reduce op); a difference fails with every host's call named.
  // (Within a host, the transport checks the same.)
  void agree(nrtsim::transport::Verb verb, int64_t dtype, int64_t count, int64_t extra);
  template <class Fn>
  void guarded(nrtsim::transport::Verb verb, Fn&& fn);

  HostLayout layout_;
  nrtsim::transport::CollectiveTransport& local_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Backend> leaders_;  // only on leaders
  c10::intrusive_ptr<c10d::Backend> flat_;
  std::string failure_;
};

}  // namespace torch_neuronx::distributed
