#include "backend/distributed/Works.h"

#include <algorithm>

#include "backend/distributed/ProcessGroupNeuron.h"

namespace torch_neuronx::distributed {

namespace {

std::vector<c10::Device> devices_of(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Device> devices;
  for (const auto& t : tensors) {
    if (!t.is_cpu() && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

c10::intrusive_ptr<c10::ivalue::Future> pending_future(const std::vector<at::Tensor>& outputs) {
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                  devices_of(outputs));
}

c10::intrusive_ptr<c10::ivalue::Future> completed_future(const std::vector<at::Tensor>& outputs) {
  auto future = pending_future(outputs);
  future->markCompleted(c10::IValue(outputs));
  return future;
}

}  // namespace

CompletedWork::CompletedWork(int rank, c10d::OpType type, uint64_t sequence,
                             std::vector<at::Tensor> outputs, float duration_ms)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      sequence_(sequence),
      duration_ms_(duration_ms) {}

c10::intrusive_ptr<c10::ivalue::Future> CompletedWork::getFuture() {
  std::call_once(future_once_, [&] { future_ = completed_future(outputs_); });
  return future_;
}

P2pWork::P2pWork(c10::intrusive_ptr<ProcessGroupNeuron> group,
                 std::shared_ptr<tp::P2pRequest> request, Staged staged, bool is_send, int peer,
                 uint64_t sequence)
    : c10d::Work(group->getRank(), is_send ? c10d::OpType::SEND : c10d::OpType::RECV),
      group_(std::move(group)),
      request_(std::move(request)),
      staged_(std::move(staged)),
      peer_(peer),
      sequence_(sequence) {
  future_ = pending_future({staged_.original});
}

bool P2pWork::isCompleted() {
  if (!finished_ && transport_call([&] { return group_->transport().test(*request_); })) finish();
  return finished_;
}

bool P2pWork::wait(std::chrono::milliseconds) {
  if (!finished_) {
    transport_call([&] { group_->transport().wait(*request_); });
    finish();
  }
  return true;
}

int P2pWork::sourceRank() const { return peer_ >= 0 ? peer_ : finished_ ? request_->peer() : -1; }

void P2pWork::finish() {
  unstage(staged_);
  finished_ = true;
  future_->markCompleted(c10::IValue(std::vector<at::Tensor>{staged_.original}));
}

GlooP2pWork::GlooP2pWork(c10::intrusive_ptr<ProcessGroupNeuron> group,
                         c10::intrusive_ptr<c10d::Work> work, Staged staged, bool is_send,
                         int peer, uint64_t sequence)
    : c10d::Work(group->getRank(), is_send ? c10d::OpType::SEND : c10d::OpType::RECV),
      group_(std::move(group)),
      work_(std::move(work)),
      staged_(std::move(staged)),
      is_send_(is_send),
      peer_(peer),
      sequence_(sequence) {
  future_ = pending_future({staged_.original});
}

bool GlooP2pWork::isCompleted() {
  if (!finished_ && work_->isCompleted()) wait(std::chrono::milliseconds(0));
  return finished_;
}

bool GlooP2pWork::wait(std::chrono::milliseconds) {
  if (!finished_) {
    HostSpan* span = group_->span();
    if (span == nullptr) {
      dist_error("neuron process group: a send/recv waited on after shutdown() or abort()");
    }
    span->wait(work_, is_send_ ? "send" : "recv");
    unstage(staged_);
    finished_ = true;
    future_->markCompleted(c10::IValue(std::vector<at::Tensor>{staged_.original}));
  }
  return true;
}

CoalescedWork::CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works,
                             uint64_t sequence)
    : c10d::Work(rank, c10d::OpType::COALESCED), works_(std::move(works)), sequence_(sequence) {}

bool CoalescedWork::isCompleted() {
  return std::all_of(works_.begin(), works_.end(), [](auto& w) { return w->isCompleted(); });
}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  for (auto& w : works_) w->wait(timeout);
  return true;
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> all;
  for (auto& w : works_) {
    auto r = w->result();
    all.insert(all.end(), r.begin(), r.end());
  }
  return all;
}

c10::intrusive_ptr<c10::ivalue::Future> CoalescedWork::getFuture() {
  wait(std::chrono::milliseconds(0));
  return completed_future(result());
}

}  // namespace torch_neuronx::distributed
