// The collective verbs, said once. The process group (which c10d call is which verb), the host
// span (which legs a verb takes across hosts), the transport (which algorithm runs it, what every
// rank must agree on) and the link model (what a call moves over which link) all read this table.
//
// What a call moves is reported, not priced here: `link_bytes` says how many bytes this rank sends
// and receives over NeuronLink within its host, how many cross hosts (EFA), and by which
// algorithm; the runtime's link model turns that into time.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/CollectiveTraffic.h"

namespace nrtsim::transport {

enum class Verb : uint8_t {
  kBarrier,
  kBroadcast,
  kAllreduce,
  kReduce,
  kAllgather,
  kGather,
  kScatter,
  kReduceScatter,
  kAlltoall,
  kSend,
  kRecv,
};
constexpr int kVerbCount = 11;

// How a verb's bytes cross the links of a group of L ranks on one host. kRing: every rank sends
// and receives the same share (ring or bus algorithms: all-reduce, all-gather, reduce-scatter);
// kDirect: ranks exchange their own buffers with the ranks that need them (one-to-all,
// all-to-one, all-to-all, point to point); kNone: synchronisation only.
enum class LinkAlgorithm : uint8_t { kNone, kRing, kDirect };

struct VerbInfo {
  Verb verb;
  const char* name;  // as messages and descriptors name it: "allreduce", "reduce_scatter"
  bool rooted;       // has a root rank: broadcast, reduce, gather, scatter
  bool reduces;      // combines values with a reduce op: allreduce, reduce, reduce_scatter
  LinkAlgorithm algorithm;
};
const VerbInfo& verb_info(Verb verb);
inline const char* verb_name(Verb verb) { return verb_info(verb).name; }

// A call of a verb, by size. `bytes`: the buffer for allreduce, reduce, broadcast, send and
// recv; one rank's part for allgather, gather, scatter and reduce_scatter (the whole output of an
// all-gather is size x bytes). `root`: the root's group rank, or for send/recv the peer's.
// `send_to` / `recv_from`: an all-to-all's bytes for each group rank.
struct VerbCall {
  Verb verb = Verb::kBarrier;
  uint64_t bytes = 0;
  int root = -1;
  std::vector<uint64_t> send_to, recv_from;
};

// Where this rank is: its group rank, the group size, and the host of every group rank (hosts
// numbered from 0; empty: all on one host).
struct GroupPlace {
  int rank = 0;
  int size = 1;
  std::vector<int> host_of;
  int hosts() const;
  int local_size() const;  // the ranks on this rank's host
  bool local(int r) const { return host_of.empty() || host_of[r] == host_of[rank]; }
};

// What one call moves for this rank. NeuronLink bytes are this rank's own (sent, received); EFA
// bytes are this rank's share of what its host sends to (and receives from) other hosts: a
// hierarchical collective spreads the inter-host leg over the host's cores, a flat one
// (gather, scatter, all-to-all, point to point between hosts) moves the rank's own bytes.
struct LinkBytes {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t efa = 0;
  LinkAlgorithm algorithm = LinkAlgorithm::kNone;
  // For the link model's choice of algorithm and its steps: the collective's whole buffer, the
  // passes it makes (an all-reduce is a reduce-scatter and an all-gather: 2), the ranks that share
  // the host's links (2 for a message to a rank on this host, 1 to another host) and the hosts.
  uint64_t buffer = 0;
  uint32_t passes = 0;
  uint32_t ranks = 1;
  uint32_t hosts = 1;
  bool point_to_point = false;
  // Every rank sends each other its piece at once: a mesh pattern whatever its size, as the
  // estimate states an all-to-all too (CollectiveTraffic::all_to_all).
  bool all_to_all = false;
};
LinkBytes link_bytes(const VerbCall& call, const GroupPlace& place);
// What the runtime's link model prices a call from (runtime/CollectiveTraffic.h, LinkModel.h):
// the larger direction over NeuronLink (full duplex), the EFA bytes, and the buffer, passes,
// ranks, hosts and pattern above. The process group puts it on the call's launch record; the estimate's
// guard test compares its own statement of a collective with it.
CollectiveTraffic collective_traffic(const LinkBytes& link);

}  // namespace nrtsim::transport
