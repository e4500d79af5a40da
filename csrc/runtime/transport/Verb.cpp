#include "runtime/transport/Verb.h"

#include <algorithm>
#include <array>

#include "runtime/Error.h"

namespace nrtsim::transport {

namespace {

using A = LinkAlgorithm;
constexpr std::array<VerbInfo, kVerbCount> kVerbs{{
    {Verb::kBarrier, "barrier", false, false, A::kNone},
    {Verb::kBroadcast, "broadcast", true, false, A::kDirect},
    {Verb::kAllreduce, "allreduce", false, true, A::kRing},
    {Verb::kReduce, "reduce", true, true, A::kDirect},
    {Verb::kAllgather, "allgather", false, false, A::kRing},
    {Verb::kGather, "gather", true, false, A::kDirect},
    {Verb::kScatter, "scatter", true, false, A::kDirect},
    {Verb::kReduceScatter, "reduce_scatter", false, true, A::kRing},
    {Verb::kAlltoall, "alltoall", false, false, A::kDirect},
    {Verb::kSend, "send", false, false, A::kDirect},
    {Verb::kRecv, "recv", false, false, A::kDirect},
}};

}  // namespace

const VerbInfo& verb_info(Verb verb) {
  const auto i = static_cast<size_t>(verb);
  if (i >= kVerbs.size() || kVerbs[i].verb != verb) {
    throw Error(ErrorCode::kInvalidArgument, "unknown collective verb " + std::to_string(i));
  }
  return kVerbs[i];
}

int GroupPlace::hosts() const {
  if (host_of.empty()) return 1;
  return *std::max_element(host_of.begin(), host_of.end()) + 1;
}

int GroupPlace::local_size() const {
  if (host_of.empty()) return size;
  return static_cast<int>(std::count(host_of.begin(), host_of.end(), host_of[rank]));
}

CollectiveTraffic collective_traffic(const LinkBytes& link) {
  CollectiveTraffic traffic;
  traffic.buffer_bytes = link.buffer;
  traffic.link_bytes = std::max(link.sent, link.received);  // full duplex: the larger direction
  traffic.network_bytes = link.efa;
  traffic.passes = link.passes;
  traffic.ranks = link.ranks;
  traffic.hosts = link.hosts;
  traffic.point_to_point = link.point_to_point;
  traffic.all_to_all = link.all_to_all;
  return traffic;
}

LinkBytes link_bytes(const VerbCall& call, const GroupPlace& place) {
  const uint64_t n = static_cast<uint64_t>(place.size);
  const uint64_t l = static_cast<uint64_t>(place.local_size());
  const uint64_t h = static_cast<uint64_t>(place.hosts());
  const uint64_t s = call.bytes;
  const bool spans = h > 1;
  const bool is_root = call.root == place.rank;
  LinkBytes b;
  b.algorithm = verb_info(call.verb).algorithm;
  b.hosts = static_cast<uint32_t>(h);
  b.ranks = static_cast<uint32_t>(l);
  b.passes = call.verb == Verb::kAllreduce ? 2 : call.verb == Verb::kBarrier ? 0 : 1;
  const bool parted = call.verb == Verb::kAllgather || call.verb == Verb::kReduceScatter ||
                      call.verb == Verb::kGather || call.verb == Verb::kScatter;
  b.buffer = parted ? s * n : s;
  switch (call.verb) {
    case Verb::kBarrier: break;
    case Verb::kAllreduce:
    case Verb::kAllgather:
    case Verb::kReduceScatter: {
      // Hierarchical, as Neuron's collectives run them across hosts (runtime/CollectiveTraffic.h,
      // the function the estimate states its collectives with too): over NeuronLink (L-1)/L of
      // the whole buffer per pass, the other hosts' parts included (an all-gather's rail brings a
      // rank only its share of them, the rest reach it from its host's other ranks); over EFA
      // this rank's shard's share held by the other hosts.
      const RankBytes r = hierarchical_bytes(b.passes, b.buffer, n, l);
      b.sent = b.received = r.link;
      b.efa = spans ? r.network : 0;
      break;
    }
    case Verb::kBroadcast:
    case Verb::kReduce: {
      // On the root's host the root sends (broadcast) or receives (reduce) the buffer once, the
      // other ranks the opposite (a pipelined chain). Across hosts the buffer crosses EFA on
      // the rails, each rank carrying its 1/L shard; on a host without the root the ranks then
      // all-gather (broadcast) or first reduce-scatter (reduce) the shards: (L-1)/L of the
      // buffer each way over NeuronLink, nothing for a rank alone on its host.
      const bool out = call.verb == Verb::kBroadcast;
      if (place.local(call.root)) {
        b.sent = is_root == out ? s : 0;
        b.received = is_root == out ? 0 : s;
      } else {
        b.sent = b.received = (l - 1) * s / l;
      }
      b.efa = spans ? s / l : 0;
      break;
    }
    case Verb::kGather:
    case Verb::kScatter: {
      // One-to-all or all-to-one: the root moves every part but its own, the others their
      // own; parts of ranks on other hosts cross EFA (a flat exchange between the ranks).
      const bool root_local = place.local(call.root);
      const uint64_t root_side = is_root ? s * (l - 1) : 0;
      const uint64_t leaf_side = !is_root && root_local ? s : 0;
      const bool to_root = call.verb == Verb::kGather;
      b.sent = to_root ? leaf_side : root_side;
      b.received = to_root ? root_side : leaf_side;
      b.efa = is_root ? s * (n - l) : (root_local ? 0 : s);
      break;
    }
    case Verb::kAlltoall: {
      uint64_t far_sent = 0, far_received = 0;
      for (int r = 0; r < place.size; ++r) {
        const uint64_t out = r < static_cast<int>(call.send_to.size()) ? call.send_to[r] : 0;
        const uint64_t in = r < static_cast<int>(call.recv_from.size()) ? call.recv_from[r] : 0;
        if (!place.local(r)) {
          far_sent += out;
          far_received += in;
        } else if (r != place.rank) {
          b.sent += out;
          b.received += in;
        }
      }
      b.efa = std::max(far_sent, far_received);
      b.all_to_all = true;
      b.buffer = 0;
      for (const uint64_t out : call.send_to) b.buffer += out;
      break;
    }
    case Verb::kSend:
    case Verb::kRecv: {
      const bool near = call.root < 0 || place.local(call.root);  // -1: any source, this host
      const bool out = call.verb == Verb::kSend;
      b.sent = near && out ? s : 0;
      b.received = near && !out ? s : 0;
      b.efa = near ? 0 : s;
      b.point_to_point = true;
      b.ranks = near ? 2 : 1;  // the two ends on this host, or one end here
      break;
    }
  }
  return b;
}

}  // namespace nrtsim::transport
