// The torch.distributed backend "neuron": a c10d::Backend over nrtsim's shared-memory collective
// transport (the simulated NeuronLink between the processes of one host, one process per logical
// NeuronCore). Every collective runs on the calling thread's current stream of its tensors'
// device as ONE launch record of kind collective (bytes sent and received over the link), so it
// shows in the profiler and takes modelled link time on the simulated clock. CPU tensors (which
// compiled programs hand to functional collectives) take the same transport without a record.
//
// Execution is host-synchronous, as nrtsim's streams are: a collective has finished when its call
// returns, and its Work is complete, with a future that carries the output tensors. Sends and
// receives are posted and complete in Work::wait (or as soon as the peer allows), so exchanges
// in either order, batched or not, do not deadlock.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/distributed/HostSpan.h"
#include "runtime/transport/CollectiveTransport.h"

namespace torch_neuronx::distributed {

class ProcessGroupNeuron : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
        : c10d::Backend::Options("neuron", timeout) {}
  };

  // Collective: every rank of the group constructs its backend with the same (prefixed) store.
  ProcessGroupNeuron(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     c10::intrusive_ptr<Options> options);
  ~ProcessGroupNeuron() override;

  const std::string getBackendName() const override { return "neuron"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts)
      override;

  void abort() override;
  void shutdown() override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  // The hierarchical part of a group whose ranks are on several hosts; null within one host.
  HostSpan* span() { return span_.get(); }

  nrtsim::transport::CollectiveTransport& transport();

 private:
  // Runs `body` as one collective launch (on the tensors' device) and returns its Work. `sent`
  // and `received` are this core's bytes over NeuronLink, `efa` its bytes (each way) between
  // hosts.
  template <class Body>
  c10::intrusive_ptr<c10d::Work> run(const char* op, c10d::OpType type,
                                     const std::vector<at::Tensor>& tensors, uint64_t sent,
                                     uint64_t received, std::vector<at::Tensor> outputs,
                                     Body&& body, uint64_t efa = 0);
  // This core's share of what crosses hosts when `host_bytes` leave (or enter) each host.
  uint64_t efa_share(uint64_t host_bytes) const;
  // The group size within this rank's host (the whole group without a span).
  int local_size() const;
  c10::intrusive_ptr<c10d::Work> collect(c10::intrusive_ptr<c10d::Work> work);
  // `peer` -1 with `any_source`: a receive from whichever rank sends `tag` first.
  c10::intrusive_ptr<c10d::Work> post_p2p(at::Tensor& tensor, int peer, int tag, bool send,
                                          bool any_source = false);

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Options> options_;
  std::unique_ptr<nrtsim::transport::CollectiveTransport> transport_;  // this host's ranks
  std::unique_ptr<HostSpan> span_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  uint64_t sequence_ = 0;
  // One collective at a time per group and process: threads that share a group (an autograd
  // worker, the main thread) must not interleave their steps through its slots.
  std::mutex collective_mutex_;
  std::map<std::string, int> splits_;  // split() calls per rank list, for unique Store keys
};

}  // namespace torch_neuronx::distributed
