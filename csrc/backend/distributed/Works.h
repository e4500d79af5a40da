// The c10d Works of the neuron process group. Collectives run host-synchronously (as nrtsim's
// streams do): their Work is complete when returned, with a future that carries the outputs
// (DDP's comm hooks need it). Sends and receives complete in wait() or isCompleted().
//
// Every Work has the group's sequence number of its call (Work.get_sequence_number(), as
// TorchNeuron's and NCCL's do), and a collective's Work its duration (get_duration(), in ms:
// the simulated device time of its launch, the time a neuron Event around it would show; host
// time for collectives on CPU tensors).
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/distributed/Staging.h"
#include "runtime/transport/PointToPoint.h"

namespace torch_neuronx::distributed {

class ProcessGroupNeuron;
class HostSpan;

class CompletedWork : public c10d::Work {
 public:
  CompletedWork(int rank, c10d::OpType type, uint64_t sequence, std::vector<at::Tensor> outputs,
                float duration_ms);
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return outputs_; }
  // Made on first request: most calls are waited on and never asked for their future (a
  // completed Future costs a list type, a device scan and a storage walk per call).
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return sequence_; }
  float getDuration() const override { return duration_ms_; }

 private:
  std::vector<at::Tensor> outputs_;
  std::once_flag future_once_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  uint64_t sequence_;
  float duration_ms_;
};

// A posted send or receive: completes in wait() (or isCompleted()) through the transport.
class P2pWork : public c10d::Work {
 public:
  P2pWork(c10::intrusive_ptr<ProcessGroupNeuron> group, std::shared_ptr<tp::P2pRequest> request,
          Staged staged, bool is_send, int peer, uint64_t sequence);
  bool isCompleted() override;
  bool isSuccess() const override { return finished_; }
  bool wait(std::chrono::milliseconds) override;
  void synchronize() override {}
  // A receive from any rank names its sender once complete (-1 before), as Gloo's does.
  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return {staged_.original}; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return sequence_; }

 private:
  void finish();
  c10::intrusive_ptr<ProcessGroupNeuron> group_;
  std::shared_ptr<tp::P2pRequest> request_;
  Staged staged_;
  int peer_;
  uint64_t sequence_;
  bool finished_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A send or receive with a rank on another host: a Gloo work on the group's flat Gloo group.
class GlooP2pWork : public c10d::Work {
 public:
  GlooP2pWork(c10::intrusive_ptr<ProcessGroupNeuron> group, c10::intrusive_ptr<c10d::Work> work,
              Staged staged, bool is_send, int peer, uint64_t sequence);
  bool isCompleted() override;
  bool isSuccess() const override { return finished_; }
  bool wait(std::chrono::milliseconds) override;
  void synchronize() override {}
  int sourceRank() const override { return peer_; }
  std::vector<at::Tensor> result() override { return {staged_.original}; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return sequence_; }

 private:
  c10::intrusive_ptr<ProcessGroupNeuron> group_;
  c10::intrusive_ptr<c10d::Work> work_;
  Staged staged_;
  bool is_send_;
  int peer_;
  uint64_t sequence_;
  bool finished_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Work of a coalesced block: waits for each of its members.
class CoalescedWork : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works, uint64_t sequence);
  bool isCompleted() override;
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return sequence_; }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  uint64_t sequence_;
};

}  // namespace torch_neuronx::distributed
