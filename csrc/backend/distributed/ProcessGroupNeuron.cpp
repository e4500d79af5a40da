#include "backend/distributed/ProcessGroupNeuron.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"
#include "runtime/Env.h"
#include "runtime/Error.h"

namespace torch_neuronx::distributed {

namespace tp = nrtsim::transport;

namespace {

[[noreturn]] void dist_error(const std::string& message) {
  C10_THROW_ERROR(DistBackendError, message);
}

// Transport errors become torch.distributed.DistBackendError, naming the backend.
template <class Fn>
decltype(auto) transport_call(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const nrtsim::Error& e) {
    dist_error(std::string("neuron process group: ") + e.what());
  }
}

tp::DType dtype_of(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kBool: return tp::DType::kBool;
    case at::kByte: return tp::DType::kUInt8;
    case at::kChar: return tp::DType::kInt8;
    case at::kShort: return tp::DType::kInt16;
    case at::kUInt16: return tp::DType::kUInt16;
    case at::kInt: return tp::DType::kInt32;
    case at::kUInt32: return tp::DType::kUInt32;
    case at::kLong: return tp::DType::kInt64;
    case at::kUInt64: return tp::DType::kUInt64;
    case at::kHalf: return tp::DType::kFloat16;
    case at::kBFloat16: return tp::DType::kBFloat16;
    case at::kFloat: return tp::DType::kFloat32;
    case at::kDouble: return tp::DType::kFloat64;
    case at::kComplexFloat: return tp::DType::kComplex64;
    case at::kComplexDouble: return tp::DType::kComplex128;
    case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2:
    case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e5m2fnuz:
    case at::kFloat8_e8m0fnu: return tp::DType::kOpaque1;
    default:
      dist_error(std::string("neuron process group: ") + op + " does not support tensors of " +
                 std::string(c10::toString(t.scalar_type())));
  }
}

bool is_floating_or_complex(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type());
}

// The transport's reduction for a c10d reduce op; AVG and PREMUL_SUM sum and scale afterwards.
tp::ReduceOp reduce_op_of(const c10d::ReduceOp& op, const at::Tensor& t, const char* name) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return tp::ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
    case c10d::ReduceOp::PREMUL_SUM:
      if (!is_floating_or_complex(t)) {
        dist_error(std::string("neuron process group: ") + name + " with ReduceOp." +
                   (op.op_ == c10d::ReduceOp::AVG ? "AVG" : "PREMUL_SUM") +
                   " needs a floating-point tensor, got " +
                   std::string(c10::toString(t.scalar_type())) +
                   "; use ReduceOp.SUM and divide yourself");
      }
      return tp::ReduceOp::kSum;
    case c10d::ReduceOp::PRODUCT: return tp::ReduceOp::kProduct;
    case c10d::ReduceOp::MIN: return tp::ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return tp::ReduceOp::kMax;
    case c10d::ReduceOp::BAND: return tp::ReduceOp::kBand;
    case c10d::ReduceOp::BOR: return tp::ReduceOp::kBor;
    case c10d::ReduceOp::BXOR: return tp::ReduceOp::kBxor;
    default: dist_error(std::string("neuron process group: ") + name + ": unknown reduce op");
  }
}

// After summing: AVG divides by the group size, PREMUL_SUM multiplies by its factor (scaling
// the sum instead of every input: the same value up to one rounding, and one pass instead of N).
void finish_reduction(const c10d::ReduceOp& op, at::Tensor& out, int size) {
  if (op.op_ == c10d::ReduceOp::AVG) {
    out.div_(size);
  } else if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    const auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(supplement != nullptr, "PREMUL_SUM without a factor");
    if (supplement->tensor_factor.defined()) {
      out.mul_(supplement->tensor_factor.to(at::kCPU).item().toDouble());
    } else {
      out.mul_(supplement->double_factor);
    }
  }
}

// A CPU tensor over the same bytes (neuron memory is host memory); CPU tensors as they are.
at::Tensor host(const at::Tensor& t) { return t.is_cpu() ? t : host_view(t); }

void* ptr(const at::Tensor& t) { return t.data_ptr(); }
size_t nbytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }
// A flat CPU byte view of a contiguous tensor: what Gloo moves between hosts, any element type.
at::Tensor host_bytes(const at::Tensor& t) { return host(t).reshape({-1}).view(at::kByte); }

void check_dense(const at::Tensor& t, const char* op) {
  if (t.layout() != at::kStrided) {
    dist_error(std::string("neuron process group: ") + op +
               " takes dense (strided) tensors; got layout " +
               std::string(c10::str(t.layout())));
  }
  if (!t.is_cpu() && t.device().type() != c10::DeviceType::PrivateUse1) {
    dist_error(std::string("neuron process group: ") + op + " takes neuron or cpu tensors, got " +
               t.device().str());
  }
}

// A contiguous tensor to work on, and whether results must be copied back to the original.
struct Staged {
  at::Tensor original;
  at::Tensor work;
  bool copy_back() const { return !work.is_same(original); }
};
Staged stage(const at::Tensor& t, const char* op) {
  check_dense(t, op);
  return Staged{t, t.is_contiguous() ? t : t.contiguous()};
}
void unstage(Staged& s) {
  if (s.copy_back()) s.original.copy_(s.work);
}

std::vector<c10::Device> devices_of(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Device> devices;
  for (const auto& t : tensors) {
    if (!t.is_cpu() && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

c10::intrusive_ptr<c10::ivalue::Future> completed_future(const std::vector<at::Tensor>& outputs) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), devices_of(outputs));
  future->markCompleted(c10::IValue(outputs));
  return future;
}

// The Work of a collective that has already run (host-synchronous execution).
class CompletedWork : public c10d::Work {
 public:
  CompletedWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)) {
    future_ = completed_future(outputs_);
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A posted send or receive: completes in wait() (or isCompleted()) through the transport.
class P2pWork : public c10d::Work {
 public:
  P2pWork(c10::intrusive_ptr<ProcessGroupNeuron> group, std::shared_ptr<tp::P2pRequest> request,
          Staged staged, bool is_send, int peer)
      : c10d::Work(group->getRank(), is_send ? c10d::OpType::SEND : c10d::OpType::RECV),
        group_(std::move(group)),
        request_(std::move(request)),
        staged_(std::move(staged)),
        peer_(peer) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), devices_of({staged_.original}));
  }
  bool isCompleted() override {
    if (!finished_ && transport_call([&] { return group_->transport().test(*request_); })) {
      finish();
    }
    return finished_;
  }
  bool isSuccess() const override { return finished_; }
  bool wait(std::chrono::milliseconds) override {
    if (!finished_) {
      transport_call([&] { group_->transport().wait(*request_); });
      finish();
    }
    return true;
  }
  void synchronize() override {}
  // A receive from any rank names its sender once complete (-1 before), as Gloo's does.
  int sourceRank() const override {
    return peer_ >= 0 ? peer_ : finished_ ? request_->peer() : -1;
  }
  std::vector<at::Tensor> result() override { return {staged_.original}; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  void finish() {
    unstage(staged_);
    finished_ = true;
    future_->markCompleted(c10::IValue(std::vector<at::Tensor>{staged_.original}));
  }
  c10::intrusive_ptr<ProcessGroupNeuron> group_;
  std::shared_ptr<tp::P2pRequest> request_;
  Staged staged_;
  int peer_;
  bool finished_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Work of a coalesced block: waits for each of its members.
class CoalescedWork : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
      : c10d::Work(rank, c10d::OpType::COALESCED), works_(std::move(works)) {}
  bool isCompleted() override {
    return std::all_of(works_.begin(), works_.end(), [](auto& w) { return w->isCompleted(); });
  }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds timeout) override {
    for (auto& w : works_) w->wait(timeout);
    return true;
  }
  void synchronize() override {}
  std::vector<at::Tensor> result() override {
    std::vector<at::Tensor> all;
    for (auto& w : works_) {
      auto r = w->result();
      all.insert(all.end(), r.begin(), r.end());
    }
    return all;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait(std::chrono::milliseconds(0));
    return completed_future(result());
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

// A send or receive with a rank on another host: a Gloo work on the group's flat Gloo group.
class GlooP2pWork : public c10d::Work {
 public:
  GlooP2pWork(c10::intrusive_ptr<ProcessGroupNeuron> group, c10::intrusive_ptr<c10d::Work> work,
              Staged staged, bool is_send, int peer)
      : c10d::Work(group->getRank(), is_send ? c10d::OpType::SEND : c10d::OpType::RECV),
        group_(std::move(group)),
        work_(std::move(work)),
        staged_(std::move(staged)),
        is_send_(is_send),
        peer_(peer) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), devices_of({staged_.original}));
  }
  bool isCompleted() override {
    if (!finished_ && work_->isCompleted()) wait(std::chrono::milliseconds(0));
    return finished_;
  }
  bool isSuccess() const override { return finished_; }
  bool wait(std::chrono::milliseconds) override {
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
  void synchronize() override {}
  int sourceRank() const override { return peer_; }
  std::vector<at::Tensor> result() override { return {staged_.original}; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<ProcessGroupNeuron> group_;
  c10::intrusive_ptr<c10d::Work> work_;
  Staged staged_;
  bool is_send_;
  int peer_;
  bool finished_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A value another rank publishes while creating the same group. The wait has the group's
// timeout, not the store's own (a TCPStore's default is far longer): a rank that never creates
// this group, or creates it under other keys, must become an error, never a hang.
std::vector<uint8_t> rendezvous_get(c10d::Store& store, const std::string& key, int rank,
                                    int from_rank, std::chrono::milliseconds timeout) {
  try {
    store.wait({key}, timeout);
  } catch (const std::exception& e) {
    dist_error("neuron process group: rank " + std::to_string(rank) + " waited " +
               std::to_string(timeout.count()) + " ms for rank " + std::to_string(from_rank) +
               " of the new group to join it: every rank of a group must create it (the same "
               "new_group / split_group calls, in the same order, on every member). Store: " +
               e.what());
  }
  return store.get(key);
}

size_t env_bytes(const char* variable, size_t fallback) {
  if (auto value = nrtsim::env::get(variable)) {
    return transport_call([&] { return static_cast<size_t>(nrtsim::env::parse_bytes(variable, *value)); });
  }
  return fallback;
}

}  // namespace

ProcessGroupNeuron::ProcessGroupNeuron(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, c10::intrusive_ptr<Options> options)
    : c10d::Backend(rank, size), store_(store), options_(std::move(options)) {
  tp::TransportOptions topts;
  topts.timeout = options_->timeout;
  topts.slot_bytes = env_bytes("NRTSIM_COLLECTIVE_SLOT_BYTES", topts.slot_bytes);
  topts.channel_bytes = env_bytes("NRTSIM_P2P_RING_BYTES", topts.channel_bytes);
  store_->setTimeout(options_->timeout);
  // Which rank is on which host (see HostSpan.h for what counts as one). The shared-memory
  // transport connects the ranks of one host; a group on several hosts adds the Gloo leg.
  const std::string me = host_identity();
  const std::string shown = host_display_name();
  store_->set("nrtsim/host/" + std::to_string(rank), std::vector<uint8_t>(me.begin(), me.end()));
  store_->set("nrtsim/hostname/" + std::to_string(rank),
              std::vector<uint8_t>(shown.begin(), shown.end()));
  HostLayout layout;
  layout.rank = rank;
  std::vector<std::string> ids;
  for (int r = 0; r < size; ++r) {
    std::string id = me;
    if (r != rank) {
      const auto other =
          rendezvous_get(*store_, "nrtsim/host/" + std::to_string(r), rank, r, options_->timeout);
      id.assign(other.begin(), other.end());
    }
    auto known = std::find(ids.begin(), ids.end(), id);
    if (known == ids.end()) {
      ids.push_back(id);
      layout.ranks_of.emplace_back();
      const auto name = rendezvous_get(*store_, "nrtsim/hostname/" + std::to_string(r), rank, r,
                                       options_->timeout);
      layout.names.emplace_back(name.begin(), name.end());
      known = ids.end() - 1;
    }
    const int host = static_cast<int>(known - ids.begin());
    layout.host_of.push_back(host);
    layout.ranks_of[host].push_back(r);
  }
  layout.host = layout.host_of[rank];
  layout.local_rank = layout.local_index(rank);
  const int local_rank = layout.local_rank;
  const int local_size = layout.local_size();
  const std::string key = "nrtsim/segment/" + std::to_string(layout.host);
  transport_call([&] {
    if (local_rank == 0) {
      const std::string name = tp::ShmSegment::unique_name("nrtsim-c10d");
      transport_ = tp::CollectiveTransport::create(name, local_size, topts, [&] {
        store_->set(key, std::vector<uint8_t>(name.begin(), name.end()));
      });
    } else {
      const auto name =
          rendezvous_get(*store_, key, rank, layout.ranks_of[layout.host][0], options_->timeout);
      transport_ = tp::CollectiveTransport::join(std::string(name.begin(), name.end()),
                                                 local_rank, local_size, topts);
    }
  });
  if (layout.hosts() > 1) {
    span_ = std::make_unique<HostSpan>(store_, std::move(layout), *transport_, options_->timeout);
  }
}

ProcessGroupNeuron::~ProcessGroupNeuron() = default;

tp::CollectiveTransport& ProcessGroupNeuron::transport() {
  if (!transport_) {
    dist_error("neuron process group: used after shutdown() or abort() released its transport");
  }
  return *transport_;
}

void ProcessGroupNeuron::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
  transport().set_timeout(timeout);
  if (span_) span_->set_timeout(timeout);
}

int ProcessGroupNeuron::local_size() const {
  return span_ ? span_->layout().local_size() : size_;
}

uint64_t ProcessGroupNeuron::efa_share(uint64_t host_bytes) const {
  // The host's EFA bandwidth is shared by its cores (the data file's figure is per core), and
  // the hierarchical algorithm spreads the inter-host leg over them.
  return span_ ? host_bytes / static_cast<uint64_t>(local_size()) : 0;
}

void ProcessGroupNeuron::abort() {
  const std::string reason = "abort() was called on rank " + std::to_string(rank_);
  if (span_) {
    span_->abort(reason);
  } else if (transport_) {
    transport_->abort(reason);
  }
}

void ProcessGroupNeuron::shutdown() {
  span_.reset();
  transport_.reset();
}

void ProcessGroupNeuron::startCoalescing() {
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::endCoalescing() {
  coalescing_ = false;
  return c10::make_intrusive<CoalescedWork>(rank_, std::move(coalesced_));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::collect(c10::intrusive_ptr<c10d::Work> work) {
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

template <class Body>
c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::run(const char* op, c10d::OpType type,
                                                       const std::vector<at::Tensor>& tensors,
                                                       uint64_t sent, uint64_t received,
                                                       std::vector<at::Tensor> outputs,
                                                       Body&& body, uint64_t efa) {
  auto& t = transport();
  std::lock_guard<std::mutex> serial(collective_mutex_);
  std::optional<c10::Device> device;
  for (const auto& x : tensors) {
    if (x.is_cpu()) continue;
    if (device && *device != x.device()) {
      dist_error(std::string("neuron process group: ") + op + " got tensors on " +
                 device->str() + " and " + x.device().str() +
                 "; one rank's tensors of a collective must be on one device");
    }
    device = x.device();
  }
  if (!device) {
    transport_call([&] { body(t); });
  } else {
    // One launch record: the bytes this core sends and receives, and what they cross, which the
    // runtime's link model prices (runtime/CollectiveTraffic.h, LinkModel.h).
    nrtsim::Work work;
    work[nrtsim::Engine::kDma].bytes_read = sent + efa;
    work[nrtsim::Engine::kDma].bytes_written = received + efa;
    nrtsim::CollectiveTraffic& traffic = work.collective;
    for (const auto& x : tensors) {
      traffic.buffer_bytes = std::max<uint64_t>(traffic.buffer_bytes, nbytes(x));
    }
    traffic.link_bytes = std::max(sent, received);  // full duplex: the larger direction
    traffic.network_bytes = efa;
    traffic.passes =
        type == c10d::OpType::ALLREDUCE || type == c10d::OpType::ALLREDUCE_COALESCED ? 2 : 1;
    traffic.point_to_point = type == c10d::OpType::SEND || type == c10d::OpType::RECV ||
                             type == c10d::OpType::RECVANYSOURCE;
    // A message goes to one peer: on this host, or (its bytes as `efa`) on another.
    traffic.ranks =
        static_cast<uint32_t>(traffic.point_to_point ? (efa > 0 ? 1 : 2) : local_size());
    traffic.hosts = static_cast<uint32_t>(span_ ? span_->layout().hosts() : 1);
    // Transport errors are translated inside the body: launch_on would make them RuntimeErrors.
    launch_on(device->index(), op, LaunchKind::kCollective, work,
              [&] { transport_call([&] { body(t); }); });
  }
  ++sequence_;
  return collect(c10::make_intrusive<CompletedWork>(rank_, type, std::move(outputs)));
}

// ---- collectives -------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "neuron process group: broadcast takes one tensor per rank");
  Staged s = stage(tensors[0], "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  const uint64_t bytes = nbytes(s.work);
  auto work = run(
      "c10d::broadcast", c10d::OpType::BROADCAST, {s.work}, root == rank_ ? bytes : 0,
      root == rank_ ? 0 : bytes, tensors,
      [&](tp::CollectiveTransport& t) {
        if (span_) {
          at::Tensor h = host(s.work);
          span_->broadcast(h, root);
        } else {
          t.broadcast(ptr(s.work), bytes, root);
        }
      },
      efa_share(bytes));
  unstage(s);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "neuron process group: allreduce takes one tensor per rank");
  Staged s = stage(tensors[0], "allreduce");
  const tp::DType dtype = dtype_of(s.work, "allreduce");
  const tp::ReduceOp op = reduce_op_of(opts.reduceOp, s.work, "allreduce");
  // A ring allreduce sends and receives 2 (N-1)/N of the buffer on each rank; across hosts, the
  // ranks of a host do that among themselves and each host's 2 (H-1)/H crosses to the others.
  const int n = local_size();
  const uint64_t moved = n > 1 ? 2 * (n - 1) * nbytes(s.work) / n : 0;
  const int hosts = span_ ? span_->layout().hosts() : 1;
  auto work = run(
      "c10d::allreduce", c10d::OpType::ALLREDUCE, {s.work}, moved, moved, tensors,
      [&](tp::CollectiveTransport& t) {
        at::Tensor h = host(s.work);
        if (span_) {
          span_->allreduce(h, dtype, op);
        } else {
          t.allreduce(ptr(s.work), s.work.numel(), dtype, op);
        }
        finish_reduction(opts.reduceOp, h, size_);
      },
      efa_share(2 * (hosts - 1) * nbytes(s.work) / hosts));
  unstage(s);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  std::vector<Staged> staged;
  uint64_t moved = 0, efa = 0;
  const int n = local_size();
  const int hosts = span_ ? span_->layout().hosts() : 1;
  for (auto& x : tensors) {
    staged.push_back(stage(x, "allreduce_coalesced"));
    reduce_op_of(opts.reduceOp, x, "allreduce_coalesced");
    moved += n > 1 ? 2 * (n - 1) * nbytes(x) / n : 0;
    efa += efa_share(2 * (hosts - 1) * nbytes(x) / hosts);
  }
  std::vector<at::Tensor> works;
  for (auto& s : staged) works.push_back(s.work);
  auto work = run(
      "c10d::allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, works, moved, moved, tensors,
      [&](tp::CollectiveTransport& t) {
        for (auto& s : staged) {
          const tp::DType dtype = dtype_of(s.work, "allreduce");
          const tp::ReduceOp op = reduce_op_of(opts.reduceOp, s.work, "allreduce");
          at::Tensor h = host(s.work);
          if (span_) {
            span_->allreduce(h, dtype, op);
          } else {
            t.allreduce(ptr(s.work), s.work.numel(), dtype, op);
          }
          finish_reduction(opts.reduceOp, h, size_);
        }
      },
      efa);
  for (auto& s : staged) unstage(s);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "neuron process group: reduce takes one tensor per rank");
  Staged s = stage(tensors[0], "reduce");
  const tp::DType dtype = dtype_of(s.work, "reduce");
  const tp::ReduceOp op = reduce_op_of(opts.reduceOp, s.work, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  const uint64_t bytes = nbytes(s.work);
  auto work = run(
      "c10d::reduce", c10d::OpType::REDUCE, {s.work}, rank_ == root ? 0 : bytes,
      rank_ == root ? bytes : 0, tensors,
      [&](tp::CollectiveTransport& t) {
        at::Tensor h = host(s.work);
        if (span_) {
          span_->reduce(h, dtype, op, root);
        } else {
          t.reduce(ptr(s.work), s.work.numel(), dtype, op, root);
        }
        if (rank_ == root) finish_reduction(opts.reduceOp, h, size_);
      },
      efa_share(bytes));
  unstage(s);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
              "neuron process group: allgather takes one input and one output list per rank");
  auto& outs = outputs[0];
  if (static_cast<int>(outs.size()) != size_) {
    dist_error("neuron process group: allgather needs an output list of " +
               std::to_string(size_) + " tensors (the group size), got " +
               std::to_string(outs.size()));
  }
  Staged in = stage(inputs[0], "allgather");
  std::vector<Staged> staged;
  for (auto& o : outs) {
    if (o.numel() != in.work.numel() || o.scalar_type() != in.work.scalar_type()) {
      dist_error("neuron process group: allgather output tensors must match the input (" +
                 std::to_string(in.work.numel()) + " elements of " +
                 std::string(c10::toString(in.work.scalar_type())) + "), got " +
                 std::to_string(o.numel()) + " of " + std::string(c10::toString(o.scalar_type())));
    }
    staged.push_back(stage(o, "allgather"));
  }
  std::vector<at::Tensor> all{in.work};
  std::vector<void*> ptrs;
  for (auto& s : staged) {
    all.push_back(s.work);
    ptrs.push_back(ptr(s.work));
  }
  const uint64_t bytes = nbytes(in.work);
  const uint64_t moved = bytes * (local_size() - 1);
  auto work = run(
      "c10d::allgather", c10d::OpType::ALLGATHER, all, moved, moved, outs,
      [&](tp::CollectiveTransport& t) {
        if (!span_) return t.allgather(ptr(in.work), ptrs.data(), bytes);
        // Gathered into one buffer in rank order, then copied to the output list.
        at::Tensor flat = at::empty({static_cast<int64_t>(bytes * size_)}, at::kByte);
        span_->allgather(host(in.work), flat);
        for (int r = 0; r < size_; ++r) {
          if (bytes > 0) std::memcpy(ptrs[r], static_cast<char*>(flat.data_ptr()) + r * bytes, bytes);
        }
      },
      efa_share(bytes * (size_ - local_size())));
  for (auto& s : staged) unstage(s);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  if (output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    dist_error("neuron process group: all_gather_into_tensor needs an output of group size (" +
               std::to_string(size_) + ") x " + std::to_string(input.numel()) + " elements of " +
               std::string(c10::toString(input.scalar_type())) + ", got " +
               std::to_string(output.numel()) + " of " +
               std::string(c10::toString(output.scalar_type())));
  }
  Staged in = stage(input, "all_gather_into_tensor");
  Staged out = stage(output, "all_gather_into_tensor");
  const uint64_t bytes = nbytes(in.work);
  std::vector<void*> ptrs;
  for (int r = 0; r < size_; ++r) ptrs.push_back(static_cast<char*>(ptr(out.work)) + r * bytes);
  const uint64_t moved = bytes * (local_size() - 1);
  auto work = run(
      "c10d::all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, {in.work, out.work}, moved,
      moved, {output},
      [&](tp::CollectiveTransport& t) {
        if (!span_) return t.allgather(ptr(in.work), ptrs.data(), bytes);
        at::Tensor h = host(out.work);
        span_->allgather(host(in.work), h);
      },
      efa_share(bytes * (size_ - local_size())));
  unstage(out);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "neuron process group: allgather_coalesced needs one output list per input");
  std::vector<at::Tensor> flat;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> out{outputs[i]};
    std::vector<at::Tensor> in{inputs[i]};
    const bool was = coalescing_;
    coalescing_ = false;
    allgather(out, in, opts);
    coalescing_ = was;
    flat.insert(flat.end(), outputs[i].begin(), outputs[i].end());
  }
  return collect(c10::make_intrusive<CompletedWork>(rank_, c10d::OpType::ALLGATHER_COALESCED,
                                                    std::move(flat)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "neuron process group: allgather_into_tensor_coalesced needs one output per input");
  const bool was = coalescing_;
  coalescing_ = false;
  for (size_t i = 0; i < inputs.size(); ++i) _allgather_base(outputs[i], inputs[i], opts);
  coalescing_ = was;
  return collect(
      c10::make_intrusive<CompletedWork>(rank_, c10d::OpType::COALESCED, outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "neuron process group: gather takes one input per rank");
  const int root = static_cast<int>(opts.rootRank);
  Staged in = stage(inputs[0], "gather");
  std::vector<Staged> staged;
  std::vector<void*> ptrs;
  std::vector<at::Tensor> all{in.work};
  if (rank_ == root) {
    if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
      dist_error("neuron process group: gather needs, on the root, an output list of " +
                 std::to_string(size_) + " tensors");
    }
    for (auto& o : outputs[0]) {
      if (o.numel() != in.work.numel() || o.scalar_type() != in.work.scalar_type()) {
        dist_error("neuron process group: gather output tensors must match the input");
      }
      staged.push_back(stage(o, "gather"));
      ptrs.push_back(ptr(staged.back().work));
      all.push_back(staged.back().work);
    }
  }
  const uint64_t bytes = nbytes(in.work);
  // Across hosts: the flat Gloo group over all ranks (bytes from other hosts cross EFA).
  const bool remote_root = span_ && !span_->layout().local(root);
  const uint64_t remote = span_ ? (rank_ == root ? bytes * (size_ - local_size()) : remote_root ? bytes : 0) : 0;
  auto work = run(
      "c10d::gather", c10d::OpType::GATHER, all, rank_ == root ? 0 : bytes - (remote_root ? bytes : 0),
      rank_ == root ? bytes * (size_ - 1) - remote : 0,
      rank_ == root ? outputs[0] : std::vector<at::Tensor>{},
      [&](tp::CollectiveTransport& t) {
        if (!span_) return t.gather(ptr(in.work), ptrs.data(), bytes, root);
        std::vector<at::Tensor> ins{host_bytes(in.work)};
        std::vector<std::vector<at::Tensor>> outs;
        if (rank_ == root) {
          outs.emplace_back();
          for (auto& o : staged) outs[0].push_back(host_bytes(o.work));
        }
        c10d::GatherOptions options;
        options.rootRank = root;
        options.timeout = options_->timeout;
        span_->wait(span_->flat().gather(outs, ins, options), "gather");
      },
      remote);
  for (auto& s : staged) unstage(s);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "neuron process group: scatter takes one output per rank");
  const int root = static_cast<int>(opts.rootRank);
  Staged out = stage(outputs[0], "scatter");
  std::vector<Staged> staged;
  std::vector<const void*> ptrs;
  std::vector<at::Tensor> all{out.work};
  if (rank_ == root) {
    if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
      dist_error("neuron process group: scatter needs, on the root, an input list of " +
                 std::to_string(size_) + " tensors");
    }
    for (auto& i : inputs[0]) {
      if (i.numel() != out.work.numel() || i.scalar_type() != out.work.scalar_type()) {
        dist_error("neuron process group: scatter input tensors must match the output");
      }
      staged.push_back(stage(i, "scatter"));
      ptrs.push_back(ptr(staged.back().work));
      all.push_back(staged.back().work);
    }
  }
  const uint64_t bytes = nbytes(out.work);
  const bool remote_root = span_ && !span_->layout().local(root);
  const uint64_t remote = span_ ? (rank_ == root ? bytes * (size_ - local_size()) : remote_root ? bytes : 0) : 0;
  auto work = run(
      "c10d::scatter", c10d::OpType::SCATTER, all,
      rank_ == root ? bytes * (size_ - 1) - remote : 0,
      rank_ == root ? 0 : bytes - (remote_root ? bytes : 0), outputs,
      [&](tp::CollectiveTransport& t) {
        if (!span_) return t.scatter(ptrs.data(), ptr(out.work), bytes, root);
        std::vector<at::Tensor> outs{host_bytes(out.work)};
        std::vector<std::vector<at::Tensor>> ins;
        if (rank_ == root) {
          ins.emplace_back();
          for (auto& i : staged) ins[0].push_back(host_bytes(i.work));
        }
        c10d::ScatterOptions options;
        options.rootRank = root;
        options.timeout = options_->timeout;
        span_->wait(span_->flat().scatter(outs, ins, options), "scatter");
      },
      remote);
  unstage(out);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "neuron process group: reduce_scatter takes one output and one input list per rank");
  if (static_cast<int>(inputs[0].size()) != size_) {
    dist_error("neuron process group: reduce_scatter needs an input list of " +
               std::to_string(size_) + " tensors (the group size)");
  }
  Staged out = stage(outputs[0], "reduce_scatter");
  const tp::DType dtype = dtype_of(out.work, "reduce_scatter");
  const tp::ReduceOp op = reduce_op_of(opts.reduceOp, out.work, "reduce_scatter");
  std::vector<Staged> staged;
  std::vector<const void*> ptrs;
  std::vector<at::Tensor> all{out.work};
  for (auto& i : inputs[0]) {
    if (i.numel() != out.work.numel() || i.scalar_type() != out.work.scalar_type()) {
      dist_error("neuron process group: reduce_scatter input tensors must match the output (" +
                 std::to_string(out.work.numel()) + " elements of " +
                 std::string(c10::toString(out.work.scalar_type())) + ")");
    }
    staged.push_back(stage(i, "reduce_scatter"));
    ptrs.push_back(ptr(staged.back().work));
    all.push_back(staged.back().work);
  }
  const uint64_t moved = nbytes(out.work) * (local_size() - 1);
  auto work = run(
      "c10d::reduce_scatter", c10d::OpType::REDUCE_SCATTER, all, moved, moved, outputs,
      [&](tp::CollectiveTransport& t) {
        at::Tensor h = host(out.work);
        if (span_) {
          std::vector<at::Tensor> parts;
          for (auto& x : staged) parts.push_back(host(x.work).reshape({-1}));
          span_->reduce_scatter(at::cat(parts), h, dtype, op);
        } else {
          t.reduce_scatter(ptrs.data(), ptr(out.work), out.work.numel(), dtype, op);
        }
        finish_reduction(opts.reduceOp, h, size_);
      },
      efa_share(nbytes(out.work) * (size_ - local_size())));
  unstage(out);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  if (input.numel() != output.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    dist_error("neuron process group: reduce_scatter_tensor needs an input of group size (" +
               std::to_string(size_) + ") x " + std::to_string(output.numel()) +
               " elements of " + std::string(c10::toString(output.scalar_type())) + ", got " +
               std::to_string(input.numel()) + " of " +
               std::string(c10::toString(input.scalar_type())));
  }
  Staged in = stage(input, "reduce_scatter_tensor");
  Staged out = stage(output, "reduce_scatter_tensor");
  const tp::DType dtype = dtype_of(out.work, "reduce_scatter_tensor");
  const tp::ReduceOp op = reduce_op_of(opts.reduceOp, out.work, "reduce_scatter_tensor");
  const uint64_t bytes = nbytes(out.work);
  std::vector<const void*> ptrs;
  for (int r = 0; r < size_; ++r) ptrs.push_back(static_cast<char*>(ptr(in.work)) + r * bytes);
  const uint64_t moved = bytes * (local_size() - 1);
  auto work = run(
      "c10d::reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, {in.work, out.work},
      moved, moved, {output},
      [&](tp::CollectiveTransport& t) {
        at::Tensor h = host(out.work);
        if (span_) {
          span_->reduce_scatter(host(in.work), h, dtype, op);
        } else {
          t.reduce_scatter(ptrs.data(), ptr(out.work), out.work.numel(), dtype, op);
        }
        finish_reduction(opts.reduceOp, h, size_);
      },
      efa_share(bytes * (size_ - local_size())));
  unstage(out);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "neuron process group: reduce_scatter_tensor_coalesced needs one output per input");
  const bool was = coalescing_;
  coalescing_ = false;
  for (size_t i = 0; i < inputs.size(); ++i) _reduce_scatter_base(outputs[i], inputs[i], opts);
  coalescing_ = was;
  return collect(c10::make_intrusive<CompletedWork>(rank_, c10d::OpType::COALESCED, outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
  if (output.scalar_type() != input.scalar_type()) {
    dist_error("neuron process group: all_to_all_single needs input and output of one dtype");
  }
  Staged in = stage(input, "all_to_all_single");
  Staged out = stage(output, "all_to_all_single");
  // Splits are in rows of dimension 0; none given means equal parts.
  auto plan = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t row_bytes = rows == 0 ? 0 : nbytes(t) / rows;
    std::vector<size_t> bytes(size_);
    if (splits.empty()) {
      if (rows % size_ != 0) {
        dist_error(std::string("neuron process group: all_to_all_single without ") + which +
                   " splits needs dimension 0 (" + std::to_string(rows) +
                   ") divisible by the group size " + std::to_string(size_));
      }
      std::fill(bytes.begin(), bytes.end(), row_bytes * (rows / size_));
    } else {
      if (static_cast<int>(splits.size()) != size_ ||
          std::accumulate(splits.begin(), splits.end(), int64_t{0}) != rows) {
        dist_error(std::string("neuron process group: all_to_all_single ") + which +
                   " splits must have one entry per rank summing to dimension 0 (" +
                   std::to_string(rows) + ")");
      }
      for (int r = 0; r < size_; ++r) bytes[r] = row_bytes * splits[r];
    }
    return bytes;
  };
  const std::vector<size_t> send = plan(in.work, input_split_sizes, "input");
  const std::vector<size_t> recv = plan(out.work, output_split_sizes, "output");
  std::vector<const void*> ins;
  std::vector<void*> outs;
  size_t at_in = 0, at_out = 0;
  uint64_t sent = 0, received = 0, remote_sent = 0, remote_received = 0;
  for (int r = 0; r < size_; ++r) {
    ins.push_back(static_cast<char*>(ptr(in.work)) + at_in);
    outs.push_back(static_cast<char*>(ptr(out.work)) + at_out);
    at_in += send[r];
    at_out += recv[r];
    if (span_ && !span_->layout().local(r)) {
      remote_sent += send[r];
      remote_received += recv[r];
    } else if (r != rank_) {
      sent += send[r];
      received += recv[r];
    }
  }
  auto work = run(
      "c10d::all_to_all_single", c10d::OpType::ALLTOALL_BASE, {in.work, out.work}, sent,
      received, {output},
      [&](tp::CollectiveTransport& t) {
        if (!span_) return t.alltoall(ins.data(), send.data(), outs.data(), recv.data());
        at::Tensor o = host_bytes(out.work);
        std::vector<int64_t> send_splits(send.begin(), send.end());
        std::vector<int64_t> recv_splits(recv.begin(), recv.end());
        c10d::AllToAllOptions options;
        options.timeout = options_->timeout;
        at::Tensor i = host_bytes(in.work);
        span_->wait(span_->flat().alltoall_base(o, i, recv_splits, send_splits, options),
                    "all_to_all_single");
      },
      std::max(remote_sent, remote_received));
  unstage(out);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions&) {
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_) {
    dist_error("neuron process group: all_to_all needs input and output lists of " +
               std::to_string(size_) + " tensors (the group size)");
  }
  std::vector<Staged> ins, outs;
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  std::vector<size_t> send, recv;
  std::vector<at::Tensor> all;
  uint64_t sent = 0, received = 0;
  for (int r = 0; r < size_; ++r) {
    if (inputs[r].scalar_type() != outputs[r].scalar_type()) {
      dist_error("neuron process group: all_to_all needs matching dtypes of inputs and outputs");
    }
    ins.push_back(stage(inputs[r], "all_to_all"));
    outs.push_back(stage(outputs[r], "all_to_all"));
    in_ptrs.push_back(ptr(ins.back().work));
    out_ptrs.push_back(ptr(outs.back().work));
    send.push_back(nbytes(ins.back().work));
    recv.push_back(nbytes(outs.back().work));
    all.push_back(ins.back().work);
    all.push_back(outs.back().work);
    if (r != rank_) {
      sent += send.back();
      received += recv.back();
    }
  }
  uint64_t remote = 0;
  if (span_) {
    for (int r = 0; r < size_; ++r) {
      if (span_->layout().local(r)) continue;
      sent -= send[r];
      received -= recv[r];
      remote = std::max(remote, static_cast<uint64_t>(std::max(send[r], recv[r])));
    }
  }
  auto work = run(
      "c10d::all_to_all", c10d::OpType::ALLTOALL, all, sent, received, outputs,
      [&](tp::CollectiveTransport& t) {
        if (!span_) return t.alltoall(in_ptrs.data(), send.data(), out_ptrs.data(), recv.data());
        // One all_to_all_single over the concatenated bytes on the flat Gloo group.
        std::vector<at::Tensor> parts;
        for (auto& i : ins) parts.push_back(host_bytes(i.work));
        at::Tensor in_flat = at::cat(parts);
        size_t total = 0;
        for (size_t b : recv) total += b;
        at::Tensor out_flat = at::empty({static_cast<int64_t>(total)}, at::kByte);
        std::vector<int64_t> send_splits(send.begin(), send.end());
        std::vector<int64_t> recv_splits(recv.begin(), recv.end());
        c10d::AllToAllOptions options;
        options.timeout = options_->timeout;
        span_->wait(span_->flat().alltoall_base(out_flat, in_flat, recv_splits, send_splits,
                                                options),
                    "all_to_all");
        size_t at = 0;
        for (int r = 0; r < size_; ++r) {
          if (recv[r] > 0) {
            std::memcpy(out_ptrs[r], static_cast<char*>(out_flat.data_ptr()) + at, recv[r]);
          }
          at += recv[r];
        }
      },
      remote);
  for (auto& s : outs) unstage(s);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::barrier(const c10d::BarrierOptions&) {
  return run("c10d::barrier", c10d::OpType::BARRIER, {}, 0, 0, {},
             [&](tp::CollectiveTransport& t) { span_ ? span_->barrier() : t.barrier(); });
}

void ProcessGroupNeuron::monitoredBarrier(const c10d::BarrierOptions& opts, bool) {
  // The transport's barrier already names the ranks that did not arrive within the timeout.
  barrier(opts);
}

// ---- point to point ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::post_p2p(at::Tensor& tensor, int peer, int tag,
                                                            bool is_send, bool any_source) {
  Staged s = stage(tensor, is_send ? "send" : "recv");
  dtype_of(s.work, is_send ? "send" : "recv");
  const uint64_t bytes = nbytes(s.work);
  if (any_source) {
    // The hosts' rings and the flat Gloo group are separate channels: a receive would have to
    // wait on both and could not withdraw from the one that did not deliver.
    if (span_) {
      dist_error("neuron process group: recv without a source rank is not supported in a group "
                 "whose ranks are on several hosts (its ranks on this host come over shared "
                 "memory, the others over Gloo); pass src=");
    }
    std::shared_ptr<tp::P2pRequest> request;
    run("c10d::recv_any_source", c10d::OpType::RECVANYSOURCE, {s.work}, 0, bytes, {},
        [&](tp::CollectiveTransport& t) {
          request = t.post_recv_any(static_cast<uint64_t>(tag), ptr(s.work), bytes);
        });
    if (coalescing_) coalesced_.pop_back();  // the P2pWork below stands for it
    return collect(c10::make_intrusive<P2pWork>(
        c10::intrusive_ptr<ProcessGroupNeuron>::reclaim_copy(this), std::move(request),
        std::move(s), false, -1));
  }
  if (peer < 0 || peer >= size_) {
    dist_error(std::string("neuron process group: ") + (is_send ? "send to" : "recv from") +
               " rank " + std::to_string(peer) + ", outside the group of " +
               std::to_string(size_) + " ranks");
  }
  if (span_ && !span_->layout().local(peer)) {
    // A rank on another host: Gloo's send/recv on the group's flat Gloo group.
    c10::intrusive_ptr<c10d::Work> gloo;
    auto post = [&](tp::CollectiveTransport&) {
      std::vector<at::Tensor> buffer{host_bytes(s.work)};
      gloo = is_send ? span_->flat().send(buffer, peer, tag) : span_->flat().recv(buffer, peer, tag);
    };
    run(is_send ? "c10d::send" : "c10d::recv", is_send ? c10d::OpType::SEND : c10d::OpType::RECV,
        {s.work}, 0, 0, {}, post, bytes);
    if (coalescing_) coalesced_.pop_back();  // the GlooP2pWork below stands for it
    return collect(c10::make_intrusive<GlooP2pWork>(
        c10::intrusive_ptr<ProcessGroupNeuron>::reclaim_copy(this), std::move(gloo), std::move(s),
        is_send, peer));
  }
  // The transport numbers the ranks of this host only.
  const int local_peer = span_ ? span_->layout().local_index(peer) : peer;
  std::shared_ptr<tp::P2pRequest> request;
  auto post = [&](tp::CollectiveTransport& t) {
    request = is_send ? t.post_send(local_peer, static_cast<uint64_t>(tag), ptr(s.work), bytes)
                      : t.post_recv(local_peer, static_cast<uint64_t>(tag), ptr(s.work), bytes);
  };
  run(is_send ? "c10d::send" : "c10d::recv", is_send ? c10d::OpType::SEND : c10d::OpType::RECV,
      {s.work}, is_send ? bytes : 0, is_send ? 0 : bytes, {}, post);
  if (coalescing_) coalesced_.pop_back();  // the P2pWork below stands for it
  return collect(c10::make_intrusive<P2pWork>(
      c10::intrusive_ptr<ProcessGroupNeuron>::reclaim_copy(this), std::move(request), std::move(s),
      is_send, peer));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(std::vector<at::Tensor>& tensors,
                                                        int dst_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "neuron process group: send takes one tensor");
  return post_p2p(tensors[0], dst_rank, tag, true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(std::vector<at::Tensor>& tensors,
                                                        int src_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "neuron process group: recv takes one tensor");
  return post_p2p(tensors[0], src_rank, tag, false);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  TORCH_CHECK(tensors.size() == 1, "neuron process group: recv takes one tensor");
  return post_p2p(tensors[0], -1, tag, false, true);
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupNeuron::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  const auto mine = std::find(ranks.begin(), ranks.end(), rank_);
  if (mine == ranks.end()) return nullptr;
  auto options = c10::make_intrusive<Options>(opts ? opts->timeout : options_->timeout);
  if (opts) {
    options->group_name = opts->group_name;
    options->group_desc = opts->group_desc;
    options->global_ranks_in_group = opts->global_ranks_in_group;
  }
  // The rendezvous goes through this group's own store, not the one split_group passes: torch
  // prefixes that one with a name hashed from the ranks and from how many groups the calling
  // process knows, which differs between members and non-members of earlier new_groups, so the
  // members of one split could wait under different prefixes forever. Keys under the rank list
  // (and the how-manieth split of that list this is, the same on every member) keep sibling
  // splits apart.
  (void)store;
  std::string key;
  for (int r : ranks) key += std::to_string(r) + ",";
  const int generation = splits_[key]++;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
      "nrtsim-split/" + key + "/" + std::to_string(generation), store_);
  return c10::make_intrusive<ProcessGroupNeuron>(prefixed, static_cast<int>(mine - ranks.begin()),
                                                 static_cast<int>(ranks.size()), options);
}

}  // namespace torch_neuronx::distributed
