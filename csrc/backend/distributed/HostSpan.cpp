#include "backend/distributed/HostSpan.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>

#include "backend/distributed/Staging.h"
#include "backend/distributed/StoreRendezvous.h"
#include "runtime/Env.h"
#include "runtime/Error.h"

namespace torch_neuronx::distributed {

namespace tp = nrtsim::transport;

namespace {

[[noreturn]] void span_error(const std::string& message) {
  C10_THROW_ERROR(DistBackendError, "neuron process group: " + message);
}

std::mutex g_factory_mutex;
GlooFactory g_factory;

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string link_target(const char* path) {
  char buffer[256] = {};
  const ssize_t n = ::readlink(path, buffer, sizeof(buffer) - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string("?");
}

char* bytes_ptr(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// Element types and reductions Gloo's allreduce implements with the transport's semantics; the
// others (16-bit and unsigned integers, bool) go through an all-gather of the hosts' partial
// results, reduced by every leader in host order.
bool gloo_reduces(const at::Tensor& t, tp::ReduceOp op) {
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
      return op != tp::ReduceOp::kBand && op != tp::ReduceOp::kBor && op != tp::ReduceOp::kBxor;
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      return true;
    case at::kComplexFloat:
    case at::kComplexDouble:
      return op == tp::ReduceOp::kSum;  // as real pairs
    default:
      return false;
  }
}

c10d::ReduceOp c10d_op(tp::ReduceOp op) {
  switch (op) {
    case tp::ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case tp::ReduceOp::kProduct: return c10d::ReduceOp::PRODUCT;
    case tp::ReduceOp::kMin: return c10d::ReduceOp::MIN;
    case tp::ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case tp::ReduceOp::kBand: return c10d::ReduceOp::BAND;
    case tp::ReduceOp::kBor: return c10d::ReduceOp::BOR;
    case tp::ReduceOp::kBxor: return c10d::ReduceOp::BXOR;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace

std::string host_identity() {
  if (auto id = nrtsim::env::get("NRTSIM_HOST_ID"); id && !id->empty()) return "id:" + *id;
  // One kernel boot, one network namespace, one PID namespace: processes that can open each
  // other's /proc/<pid>/fd (the transport's segment) and reach each other's loopback.
  return first_line("/proc/sys/kernel/random/boot_id") + "/" + link_target("/proc/self/ns/net") +
         "/" + link_target("/proc/self/ns/pid");
}

std::string host_display_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::string shown = name;
  if (auto id = nrtsim::env::get("NRTSIM_HOST_ID"); id && !id->empty()) {
    shown += " (NRTSIM_HOST_ID=" + *id + ")";
  } else {
    shown += " (" + link_target("/proc/self/ns/net") + ")";
  }
  return shown;
}

int HostLayout::local_index(int r) const {
  const auto& ranks = ranks_of[host_of[r]];
  return static_cast<int>(std::find(ranks.begin(), ranks.end(), r) - ranks.begin());
}

HostLayout HostLayout::discover(c10d::Store& store, int rank, int size,
                                std::chrono::milliseconds timeout) {
  const std::string me = host_identity();
  const std::string shown = host_display_name();
  store.set("nrtsim/host/" + std::to_string(rank), std::vector<uint8_t>(me.begin(), me.end()));
  store.set("nrtsim/hostname/" + std::to_string(rank),
            std::vector<uint8_t>(shown.begin(), shown.end()));
  std::vector<std::string> keys;
  std::vector<int> from;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    keys.push_back("nrtsim/host/" + std::to_string(r));
    from.push_back(r);
  }
  rendezvous_wait(store, keys, from, rank, timeout, rank == 0 && size >= 8);
  HostLayout layout;
  layout.rank = rank;
  std::vector<std::string> ids;
  for (int r = 0; r < size; ++r) {
    std::string id = me;
    if (r != rank) {
      const auto other = store.get("nrtsim/host/" + std::to_string(r));
      id.assign(other.begin(), other.end());
    }
    auto known = std::find(ids.begin(), ids.end(), id);
    if (known == ids.end()) {
      ids.push_back(id);
      layout.ranks_of.emplace_back();
      const auto name = rendezvous_get(store, "nrtsim/hostname/" + std::to_string(r), rank, r,
                                       timeout);
      layout.names.emplace_back(name.begin(), name.end());
      known = ids.end() - 1;
    }
    const int host = static_cast<int>(known - ids.begin());
    layout.host_of.push_back(host);
    layout.ranks_of[host].push_back(r);
  }
  layout.host = layout.host_of[rank];
  layout.local_rank = layout.local_index(rank);
  return layout;
}

void set_gloo_factory(GlooFactory factory) {
  std::lock_guard<std::mutex> lock(g_factory_mutex);
  g_factory = std::move(factory);
}

HostSpan::HostSpan(const c10::intrusive_ptr<c10d::Store>& store, HostLayout layout,
                   tp::CollectiveTransport& local, std::chrono::milliseconds timeout)
    : layout_(std::move(layout)), local_(local), timeout_(timeout) {
  GlooFactory factory;
  {
    std::lock_guard<std::mutex> lock(g_factory_mutex);
    factory = g_factory;
  }
  if (!factory) {
    span_error("the group spans " + std::to_string(layout_.hosts()) +
               " hosts, and its inter-host leg (Gloo) is created by torch_neuronx's Python layer, "
               "which has not installed it: import torch_neuronx before creating the group");
  }
  // The leaders first (only they take part), then every rank's flat group: the two
  // rendezvous are under different prefixes of the group's store.
  if (layout_.leader()) {
    leaders_ = factory(c10::make_intrusive<c10d::PrefixStore>("nrtsim-gloo/leaders", store),
                       layout_.host, layout_.hosts(), timeout);
  }
  flat_ = factory(c10::make_intrusive<c10d::PrefixStore>("nrtsim-gloo/all", store), layout_.rank,
                  static_cast<int>(layout_.host_of.size()), timeout);
}

HostSpan::~HostSpan() = default;

void HostSpan::set_timeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  if (leaders_) leaders_->setTimeout(timeout);
  if (flat_) flat_->setTimeout(timeout);
}

void HostSpan::abort(const std::string& reason) {
  if (failure_.empty()) failure_ = reason;
  try {
    local_.abort("rank " + std::to_string(layout_.rank) + ": " + reason);
  } catch (...) {
  }
  // Closing the Gloo connections makes the other hosts' pending and later exchanges with this
  // rank fail at once instead of at their timeout.
  leaders_.reset();
  flat_.reset();
}

void HostSpan::check_usable() {
  if (!failure_.empty()) span_error("the group was aborted: " + failure_);
}

c10d::Backend& HostSpan::leaders() {
  check_usable();
  if (!leaders_) span_error("internal: the inter-host group is used on a rank that is no leader");
  return *leaders_;
}

c10d::Backend& HostSpan::flat() {
  check_usable();
  if (!flat_) span_error("the group's inter-host connections are closed");
  return *flat_;
}

void HostSpan::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    const std::string reason = std::string(what) + " between hosts failed (Gloo): " + e.what();
    abort(reason);
    span_error(reason);
  }
}

template <class Fn>
void HostSpan::guarded(tp::Verb verb, Fn&& fn) {
  const char* what = tp::verb_name(verb);
  check_usable();
  try {
    fn();
  } catch (const nrtsim::Error& e) {
    // The host's transport failed (a dead or late peer on this host, a mismatch). The ranks on
    // the other hosts may be waiting for this one: abort so that they fail now too. The
    // transport numbers only this host's ranks: say which group ranks those are.
    std::string ranks;
    for (int r : layout_.ranks_of[layout_.host]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    const std::string message = std::string(e.what()) + " [ranks 0.." +
                                std::to_string(layout_.local_size() - 1) + " of host '" +
                                layout_.names[layout_.host] + "' are the group's ranks " + ranks + "]";
    abort(std::string(what) + " failed on rank " + std::to_string(layout_.rank) + ": " + message);
    span_error(message);
  } catch (const std::exception& e) {
    abort(std::string(what) + " failed on rank " + std::to_string(layout_.rank) + ": " + e.what());
    throw;
  }
}

void HostSpan::agree(tp::Verb verb, int64_t dtype, int64_t count, int64_t extra) {
  const int hosts = layout_.hosts();
  const char* what = tp::verb_name(verb);
  const int64_t kind = static_cast<int64_t>(verb);
  at::Tensor mine = at::tensor({kind, dtype, count, extra}, at::kLong);
  std::vector<at::Tensor> in{mine};
  std::vector<std::vector<at::Tensor>> all(1);
  for (int h = 0; h < hosts; ++h) all[0].push_back(at::empty_like(mine));
  wait(leaders().allgather(all, in, c10d::AllgatherOptions{}), what);
  bool same = true;
  for (int h = 0; h < hosts; ++h) same = same && at::equal(all[0][h], mine);
  if (same) return;
  std::string calls;
  for (int h = 0; h < hosts; ++h) {
    const auto* d = all[0][h].data_ptr<int64_t>();
    calls += "; host '" + layout_.names[h] + "' (ranks from " + std::to_string(layout_.ranks_of[h][0]) +
             "): " + tp::verb_name(static_cast<tp::Verb>(d[0])) + " of " +
             std::to_string(d[2]) + " elements of " +
             std::string(c10::toString(static_cast<at::ScalarType>(d[1]))) + " (root/op " +
             std::to_string(d[3]) + ")";
  }
  span_error(std::string("hosts called different collectives or sizes") + calls);
}

void HostSpan::allreduce_leaders(tp::Verb verb, at::Tensor& x, tp::DType dtype, tp::ReduceOp op) {
  if (layout_.hosts() < 2) return;
  agree(verb, static_cast<int64_t>(x.scalar_type()), x.numel(), static_cast<int64_t>(op));
  if (x.numel() == 0) return;
  if (gloo_reduces(x, op)) {
    at::Tensor flat = x.reshape({-1});
    if (flat.is_complex()) flat = at::view_as_real(flat);
    std::vector<at::Tensor> tensors{flat};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d_op(op);
    options.timeout = timeout_;
    wait(leaders().allreduce(tensors, options), tp::verb_name(verb));
    return;
  }
  // Every leader gets every host's partial and combines them in host order: the same bits on
  // every host, for element types Gloo does not reduce.
  std::vector<at::Tensor> in{host_bytes(x)};
  std::vector<std::vector<at::Tensor>> parts(1);
  for (int h = 0; h < layout_.hosts(); ++h) parts[0].push_back(at::empty_like(in[0]));
  wait(leaders().allgather(parts, in, c10d::AllgatherOptions{}), tp::verb_name(verb));
  std::vector<const void*> srcs;
  for (const auto& p : parts[0]) srcs.push_back(p.data_ptr());
  tp::reduce(x.data_ptr(), srcs.data(), layout_.hosts(), static_cast<size_t>(x.numel()), dtype,
             op);
}

void HostSpan::allreduce(at::Tensor& x, tp::DType dtype, tp::ReduceOp op) {
  guarded(tp::Verb::kAllreduce, [&] {
    const size_t count = static_cast<size_t>(x.numel());
    if (layout_.local_size() > 1) local_.reduce(x.data_ptr(), count, dtype, op, 0);
    if (layout_.leader()) allreduce_leaders(tp::Verb::kAllreduce, x, dtype, op);
    if (layout_.local_size() > 1) local_.broadcast(x.data_ptr(), nbytes(x), 0);
  });
}

void HostSpan::reduce(at::Tensor& x, tp::DType dtype, tp::ReduceOp op, int root) {
  guarded(tp::Verb::kReduce, [&] {
    // The transport reduces into its root's buffer only: the leader works on a copy, so that
    // its own tensor stays as it was unless it is the root.
    at::Tensor acc = layout_.leader() ? x.clone() : x;
    const size_t count = static_cast<size_t>(x.numel());
    if (layout_.local_size() > 1) local_.reduce(acc.data_ptr(), count, dtype, op, 0);
    if (layout_.leader()) allreduce_leaders(tp::Verb::kReduce, acc, dtype, op);
    if (layout_.host_of[root] != layout_.host) return;
    if (layout_.local_index(root) == 0) {
      if (layout_.rank == root) x.copy_(acc);
      return;
    }
    at::Tensor result = layout_.leader() ? acc : at::empty_like(x);
    local_.broadcast(result.data_ptr(), nbytes(x), 0);
    if (layout_.rank == root) x.copy_(result);
  });
}

void HostSpan::broadcast(at::Tensor& x, int root) {
  guarded(tp::Verb::kBroadcast, [&] {
    const int root_host = layout_.host_of[root];
    const size_t bytes = nbytes(x);
    if (layout_.host == root_host && layout_.local_size() > 1) {
      local_.broadcast(x.data_ptr(), bytes, layout_.local_index(root));
    }
    if (layout_.leader()) agree(tp::Verb::kBroadcast, static_cast<int64_t>(x.scalar_type()), x.numel(), root);
    if (bytes == 0) return;
    if (layout_.leader()) {
      std::vector<at::Tensor> tensors{host_bytes(x)};
      c10d::BroadcastOptions options;
      options.rootRank = root_host;
      options.timeout = timeout_;
      wait(leaders().broadcast(tensors, options), "broadcast");
    }
    if (layout_.host != root_host && layout_.local_size() > 1) {
      local_.broadcast(x.data_ptr(), bytes, 0);
    }
  });
}

void HostSpan::allgather(const at::Tensor& in, at::Tensor& out) {
  guarded(tp::Verb::kAllgather, [&] {
    const size_t bytes = nbytes(in);
    const auto& mine = layout_.ranks_of[layout_.host];
    char* o = bytes_ptr(out);
    // 1. This host's pieces to its leader, straight into their places in the output.
    std::vector<void*> outs;
    for (int r : mine) outs.push_back(o + r * bytes);
    if (layout_.local_size() > 1) {
      local_.gather(in.data_ptr(), outs.data(), bytes, 0);
    } else if (bytes > 0) {
      std::memcpy(o + layout_.rank * bytes, in.data_ptr(), bytes);
    }
    // 2. Leaders exchange their hosts' blocks (padded to the largest host: Gloo's allgather
    // takes equal sizes) and unpack them into group rank order.
    if (layout_.leader()) agree(tp::Verb::kAllgather, static_cast<int64_t>(in.scalar_type()), in.numel(), 0);
    if (layout_.leader() && bytes > 0) {
      size_t most = 0;
      for (const auto& ranks : layout_.ranks_of) most = std::max(most, ranks.size());
      at::Tensor block = at::empty({static_cast<int64_t>(most * bytes)}, at::kByte);
      for (size_t j = 0; j < mine.size(); ++j) {
        std::memcpy(bytes_ptr(block) + j * bytes, o + mine[j] * bytes, bytes);
      }
      std::vector<at::Tensor> tensors{block};
      std::vector<std::vector<at::Tensor>> blocks(1);
      for (int h = 0; h < layout_.hosts(); ++h) blocks[0].push_back(at::empty_like(block));
      wait(leaders().allgather(blocks, tensors, c10d::AllgatherOptions{}), "allgather");
      for (int h = 0; h < layout_.hosts(); ++h) {
        if (h == layout_.host) continue;
        const auto& ranks = layout_.ranks_of[h];
        for (size_t j = 0; j < ranks.size(); ++j) {
          std::memcpy(o + ranks[j] * bytes, bytes_ptr(blocks[0][h]) + j * bytes, bytes);
        }
      }
    }
    // 3. Fan out within the host.
    if (layout_.local_size() > 1) local_.broadcast(o, nbytes(out), 0);
  });
}

void HostSpan::reduce_scatter(const at::Tensor& in, at::Tensor& out, tp::DType dtype,
                              tp::ReduceOp op) {
  guarded(tp::Verb::kReduceScatter, [&] {
    const size_t bytes = nbytes(out);
    // Reduce the whole input within the host onto the leader (a copy: the input stays as it
    // was), across hosts between the leaders, then scatter each rank's share within the host.
    at::Tensor acc = layout_.leader() ? in.clone() : in;
    if (layout_.local_size() > 1) {
      local_.reduce(acc.data_ptr(), static_cast<size_t>(acc.numel()), dtype, op, 0);
    }
    if (layout_.leader()) allreduce_leaders(tp::Verb::kReduceScatter, acc, dtype, op);
    const auto& mine = layout_.ranks_of[layout_.host];
    if (layout_.local_size() > 1) {
      std::vector<const void*> shares;
      for (int r : mine) shares.push_back(bytes_ptr(acc) + r * bytes);
      local_.scatter(shares.data(), out.data_ptr(), bytes, 0);
    } else if (bytes > 0) {
      std::memcpy(out.data_ptr(), bytes_ptr(acc) + layout_.rank * bytes, bytes);
    }
  });
}

void HostSpan::barrier() {
  guarded(tp::Verb::kBarrier, [&] {
    if (layout_.local_size() > 1) local_.barrier();
    if (layout_.leader()) {
      agree(tp::Verb::kBarrier, 0, 0, 0);
      c10d::BarrierOptions options;
      options.timeout = timeout_;
      wait(leaders().barrier(options), "barrier");
    }
    if (layout_.local_size() > 1) local_.barrier();
  });
}

void HostSpan::exchange(Exchange& x) {
  // The parts as one buffer in group rank order: the whole tensor they are pieces of, or a
  // temporary one (copied back into the list for outputs).
  auto flat_parts = [&](std::vector<at::Tensor>& list, const at::Tensor& whole) {
    if (whole.defined()) return host_bytes(whole);
    if (list.empty()) return at::Tensor();
    std::vector<at::Tensor> bytes;
    for (auto& p : list) bytes.push_back(host_bytes(p));
    return at::cat(bytes);
  };
  auto unflatten = [&](std::vector<at::Tensor>& list, const at::Tensor& whole, at::Tensor& flat) {
    if (whole.defined()) return;
    int64_t at = 0;
    for (auto& p : list) {
      const int64_t n = static_cast<int64_t>(nbytes(p));
      host_bytes(p).copy_(flat.narrow(0, at, n));
      at += n;
    }
  };
  switch (x.verb) {
    case tp::Verb::kBarrier: return barrier();
    case tp::Verb::kBroadcast: {
      at::Tensor h = host(x.one);
      return broadcast(h, x.root);
    }
    case tp::Verb::kAllreduce: {
      at::Tensor h = host(x.one);
      return allreduce(h, x.dtype, x.op);
    }
    case tp::Verb::kReduce: {
      at::Tensor h = host(x.one);
      return reduce(h, x.dtype, x.op, x.root);
    }
    case tp::Verb::kAllgather: {
      at::Tensor flat = x.whole.defined()
                            ? host_bytes(x.whole)
                            : at::empty({static_cast<int64_t>(nbytes(x.one) * layout_.host_of.size())}, at::kByte);
      allgather(host_bytes(x.one), flat);
      return unflatten(x.parts, x.whole, flat);
    }
    case tp::Verb::kReduceScatter: {
      at::Tensor h = host(x.one);
      at::Tensor in = x.whole.defined() ? host(x.whole).reshape({-1}) : [&] {
        std::vector<at::Tensor> flat;
        for (auto& p : x.parts) flat.push_back(host(p).reshape({-1}));
        return at::cat(flat);
      }();
      return reduce_scatter(in, h, x.dtype, x.op);
    }
    case tp::Verb::kGather:
    case tp::Verb::kScatter: {
      // A flat Gloo group over all ranks, moving bytes (any element type).
      std::vector<at::Tensor> mine{host_bytes(x.one)};
      std::vector<std::vector<at::Tensor>> others;
      if (!x.parts.empty()) {
        others.emplace_back();
        for (auto& p : x.parts) others[0].push_back(host_bytes(p));
      }
      if (x.verb == tp::Verb::kGather) {
        c10d::GatherOptions options;
        options.rootRank = x.root;
        options.timeout = timeout_;
        return wait(flat().gather(others, mine, options), "gather");
      }
      c10d::ScatterOptions options;
      options.rootRank = x.root;
      options.timeout = timeout_;
      return wait(flat().scatter(mine, others, options), "scatter");
    }
    case tp::Verb::kAlltoall: {
      at::Tensor in = flat_parts(x.sends, x.sends_whole);
      at::Tensor out = x.whole.defined() ? host_bytes(x.whole) : [&] {
        size_t total = 0;
        for (auto& p : x.parts) total += nbytes(p);
        return at::empty({static_cast<int64_t>(total)}, at::kByte);
      }();
      std::vector<int64_t> send_splits, recv_splits;
      for (auto& s : x.sends) send_splits.push_back(static_cast<int64_t>(nbytes(s)));
      for (auto& r : x.parts) recv_splits.push_back(static_cast<int64_t>(nbytes(r)));
      if (!in.defined()) in = at::empty({0}, at::kByte);
      c10d::AllToAllOptions options;
      options.timeout = timeout_;
      wait(flat().alltoall_base(out, in, recv_splits, send_splits, options),
                  "all_to_all");
      return unflatten(x.parts, x.whole, out);
    }
    case tp::Verb::kSend:
    case tp::Verb::kRecv: break;
  }
  span_error(std::string("internal: ") + tp::verb_name(x.verb) + " is not a collective");
}

}  // namespace torch_neuronx::distributed
