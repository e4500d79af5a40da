// The torch.distributed backend "neuron": a c10d::Backend over nrtsim's shared-memory collective
// transport (the simulated NeuronLink between the processes of one host, one process per logical
// NeuronCore), with Gloo between host leaders when the group spans hosts (HostSpan.h).
//
// Every c10d call takes one path: its tensors are checked and staged (contiguous copies where
// needed), described as exchanges of one transport verb (Verb.h), run as ONE launch record of
// kind collective on the calling thread's current stream of its tensors' device (what each
// rank sends and receives over which link, from the verb table), then outputs are copied back.
// What differs between calls is data: the call's record name, c10d OpType and verb, and which
// tensors are its parts. CPU tensors (which compiled programs hand to functional collectives)
// take the same transport without a record.
//
// Execution is host-synchronous, as nrtsim's streams are: a collective has finished when its call
// returns (Works.h). Sends and receives are posted and complete in Work::wait (or as soon as the
// peer allows), so exchanges in either order, batched or not, do not deadlock.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/distributed/Exchange.h"
#include "backend/distributed/HostSpan.h"
#include "backend/distributed/Staging.h"
#include "runtime/transport/CollectiveTransport.h"
#include "runtime/transport/Verb.h"

namespace torch_neuronx::distributed {

class ProcessGroupNeuron : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
        : c10d::Backend::Options("neuron", timeout) {}
  };

  // Collective: every rank of the group constructs its backend with the same (prefixed) store.
  // The store is used only here (and in split()): once created, the group never touches it, so
  // it outlives the rank that hosts the store (as c10d's own backends do).
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

  // One c10d call as data: its launch record's name, c10d's OpType, and the verb it is.
  struct CallSpec {
    const char* record;
    c10d::OpType type;
    tp::Verb verb;
  };

  using Exchange = distributed::Exchange;

 private:
  // The staging of one call: inputs, outputs (copied back after the call), the Work's result.
  struct Call {
    std::vector<Exchange> exchanges;
    std::vector<Staged> outputs;
    std::vector<at::Tensor> tensors;  // every staged tensor, for the device check
    std::vector<at::Tensor> results;
    at::Tensor input(const at::Tensor& t, const char* op);
    at::Tensor output(const at::Tensor& t, const char* op);
  };

  // The one path of every collective: device check, link bytes, the launch record, the
  // exchanges (on this host's transport or across hosts), reductions finished, outputs copied
  // back, the Work.
  c10::intrusive_ptr<c10d::Work> execute(const CallSpec& spec, Call& call);
  void exchange_on_host(Exchange& x, tp::CollectiveTransport& t);
  void check_root(int64_t root, const char* op) const;
  tp::GroupPlace place() const;

  // The exchange of a verb that takes one part per rank (all-gather, gather, scatter,
  // reduce-scatter), from a list of parts or one tensor's consecutive pieces.
  Exchange parted(const CallSpec& spec, Call& call, const at::Tensor& one,
                  std::vector<at::Tensor>* list, const at::Tensor* whole, int root,
                  const c10d::ReduceOp* reduce);

  c10::intrusive_ptr<c10d::Work> collect(c10::intrusive_ptr<c10d::Work> work);
  // `peer` -1 with `any_source`: a receive from whichever rank sends `tag` first.
  c10::intrusive_ptr<c10d::Work> post_p2p(at::Tensor& tensor, int peer, int tag, bool send,
                                          bool any_source = false);

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Options> options_;
  std::unique_ptr<nrtsim::transport::CollectiveTransport> transport_;  // this host's ranks
  std::unique_ptr<HostSpan> span_;
  std::vector<int> host_of_;  // per group rank; empty within one host
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  uint64_t sequence_ = 0;
  // One collective at a time per group and process: threads that share a group (an autograd
  // worker, the main thread) must not interleave their steps through its slots.
  std::mutex collective_mutex_;
  std::map<std::string, int> splits_;  // children made per rank list, for unique Store keys
  // The child of the last split() and the split_group call it came from (torch's group name):
  // torch 2.13's ProcessGroup::splitGroup calls split() once per device type the parent maps to
  // this backend (cpu and neuron) and keeps only the first child, so the second call of the same
  // splitGroup must answer that child instead of building, and at once dropping, another.
  std::string last_split_call_;
  c10::weak_intrusive_ptr<c10d::Backend> last_split_{c10::intrusive_ptr<c10d::Backend>()};
};

}  // namespace torch_neuronx::distributed
