// The verb table: one entry per verb, and what each verb moves over which link for a rank, as the
// process group reports it to the link model.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "runtime/Error.h"
#include "runtime/transport/Verb.h"

using namespace nrtsim::transport;

namespace {

GroupPlace one_host(int rank, int size) {
  GroupPlace p;
  p.rank = rank;
  p.size = size;
  return p;
}

// 2 hosts of 2 ranks, interleaved: ranks 0 and 2 on host 0, 1 and 3 on host 1.
GroupPlace two_hosts(int rank) {
  GroupPlace p;
  p.rank = rank;
  p.size = 4;
  p.host_of = {0, 1, 0, 1};
  return p;
}

VerbCall call(Verb verb, uint64_t bytes, int root = -1) {
  VerbCall c;
  c.verb = verb;
  c.bytes = bytes;
  c.root = root;
  return c;
}

}  // namespace

TEST(Verb, EveryVerbHasOneEntryNamedOnce) {
  std::set<std::string> names;
  for (int i = 0; i < kVerbCount; ++i) {
    const VerbInfo& info = verb_info(static_cast<Verb>(i));
    EXPECT_EQ(static_cast<int>(info.verb), i);
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
  }
  EXPECT_TRUE(verb_info(Verb::kGather).rooted);
  EXPECT_FALSE(verb_info(Verb::kAllgather).rooted);
  EXPECT_TRUE(verb_info(Verb::kReduceScatter).reduces);
  EXPECT_THROW(verb_info(static_cast<Verb>(kVerbCount)), nrtsim::Error);
}

TEST(Verb, RingVerbsMoveTheBusShareOnOneHost) {
  // 4 ranks: an all-reduce of 1000 bytes sends and receives 2 x 3/4 of it; all-gather and
  // reduce-scatter move the 3 other parts.
  const LinkBytes ar = link_bytes(call(Verb::kAllreduce, 1000), one_host(1, 4));
  EXPECT_EQ(ar.sent, 1500u);
  EXPECT_EQ(ar.received, 1500u);
  EXPECT_EQ(ar.efa, 0u);
  EXPECT_EQ(ar.algorithm, LinkAlgorithm::kRing);
  const LinkBytes ag = link_bytes(call(Verb::kAllgather, 250), one_host(0, 4));
  EXPECT_EQ(ag.sent, 750u);
  EXPECT_EQ(ag.received, 750u);
  const LinkBytes rs = link_bytes(call(Verb::kReduceScatter, 250), one_host(3, 4));
  EXPECT_EQ(rs.sent, 750u);
  EXPECT_EQ(link_bytes(call(Verb::kBarrier, 0), one_host(0, 4)).algorithm, LinkAlgorithm::kNone);
  // What the link model picks its algorithm by: the whole buffer, the passes, who shares links.
  EXPECT_EQ(ar.passes, 2u);
  EXPECT_EQ(ar.buffer, 1000u);
  EXPECT_EQ(ag.passes, 1u);
  EXPECT_EQ(ag.buffer, 1000u);  // the all-gather's whole output
  EXPECT_EQ(ag.ranks, 4u);
  EXPECT_EQ(ag.hosts, 1u);
}

TEST(Verb, RootedVerbsMoveTheRootsSide) {
  const LinkBytes at_root = link_bytes(call(Verb::kBroadcast, 100, 2), one_host(2, 4));
  EXPECT_EQ(at_root.sent, 100u);
  EXPECT_EQ(at_root.received, 0u);
  const LinkBytes leaf = link_bytes(call(Verb::kBroadcast, 100, 2), one_host(0, 4));
  EXPECT_EQ(leaf.received, 100u);
  EXPECT_EQ(link_bytes(call(Verb::kReduce, 100, 0), one_host(0, 4)).received, 100u);
  EXPECT_EQ(link_bytes(call(Verb::kReduce, 100, 0), one_host(3, 4)).sent, 100u);
  // Gather and scatter mirror each other: the root takes (gives) the 3 other parts.
  const LinkBytes g = link_bytes(call(Verb::kGather, 10, 1), one_host(1, 4));
  const LinkBytes s = link_bytes(call(Verb::kScatter, 10, 1), one_host(1, 4));
  EXPECT_EQ(g.received, 30u);
  EXPECT_EQ(s.sent, 30u);
  EXPECT_EQ(g.sent, 0u);
  EXPECT_EQ(s.received, 0u);
}

TEST(Verb, AcrossHostsTheInterHostLegIsSharedByTheHostsCores) {
  // All-reduce of 1000 bytes, 2 hosts of 2: within the host 2 x 1/2; between hosts each host's
  // 2 x 1/2 of the buffer, spread over its 2 cores.
  const LinkBytes ar = link_bytes(call(Verb::kAllreduce, 1000), two_hosts(2));
  EXPECT_EQ(ar.sent, 1000u);
  EXPECT_EQ(ar.efa, 500u);
  // All-gather of 100-byte parts (400 in all): the other host's two parts cross EFA, one on each
  // core's rail; each core then receives its host's other part and the other host's part its
  // peer carried over NeuronLink, 1/2 of the whole. It ends with 100 + 100 + 200 = 400 bytes.
  // Reduce-scatter sends what an all-gather receives.
  const LinkBytes ag = link_bytes(call(Verb::kAllgather, 100), two_hosts(0));
  EXPECT_EQ(ag.received, 200u);
  EXPECT_EQ(ag.efa, 100u);
  const LinkBytes rs = link_bytes(call(Verb::kReduceScatter, 100), two_hosts(3));
  EXPECT_EQ(rs.sent, 200u);
  EXPECT_EQ(rs.efa, 100u);
  // A broadcast from rank 0 of 1000 bytes: on its host (ranks 0, 2) the root sends the buffer
  // and rank 2 receives it, each carrying 500 bytes out over EFA; on host 1 each rank receives
  // its 500-byte shard over EFA and the other shard from its peer. A reduce mirrors it.
  EXPECT_EQ(link_bytes(call(Verb::kBroadcast, 1000, 0), two_hosts(0)).sent, 1000u);
  EXPECT_EQ(link_bytes(call(Verb::kBroadcast, 1000, 0), two_hosts(2)).received, 1000u);
  const LinkBytes far_leaf = link_bytes(call(Verb::kBroadcast, 1000, 0), two_hosts(1));
  EXPECT_EQ(far_leaf.received, 500u);
  EXPECT_EQ(far_leaf.efa, 500u);
  const LinkBytes far_part = link_bytes(call(Verb::kReduce, 1000, 0), two_hosts(3));
  EXPECT_EQ(far_part.sent, 500u);
  EXPECT_EQ(far_part.efa, 500u);
  EXPECT_EQ(link_bytes(call(Verb::kReduce, 1000, 0), two_hosts(0)).received, 1000u);
  // A rank alone on its host has no NeuronLink peer: the whole buffer crosses EFA.
  GroupPlace alone = two_hosts(1);
  alone.host_of = {0, 1, 0, 0};
  const LinkBytes lone = link_bytes(call(Verb::kBroadcast, 1000, 0), alone);
  EXPECT_EQ(lone.received, 0u);
  EXPECT_EQ(lone.efa, 1000u);
  // A gather to rank 1 (host 1): rank 0's part crosses EFA; rank 3 (host 1) sends over NeuronLink.
  EXPECT_EQ(link_bytes(call(Verb::kGather, 64, 1), two_hosts(0)).efa, 64u);
  EXPECT_EQ(link_bytes(call(Verb::kGather, 64, 1), two_hosts(3)).sent, 64u);
  EXPECT_EQ(link_bytes(call(Verb::kGather, 64, 1), two_hosts(1)).efa, 128u);
  // Point to point: a peer on this host over NeuronLink, on another over EFA.
  EXPECT_EQ(link_bytes(call(Verb::kSend, 8, 2), two_hosts(0)).sent, 8u);
  EXPECT_EQ(link_bytes(call(Verb::kSend, 8, 1), two_hosts(0)).efa, 8u);
  EXPECT_EQ(link_bytes(call(Verb::kRecv, 8, -1), two_hosts(0)).received, 8u);  // any source
  EXPECT_TRUE(link_bytes(call(Verb::kSend, 8, 1), two_hosts(0)).point_to_point);
  EXPECT_EQ(link_bytes(call(Verb::kSend, 8, 1), two_hosts(0)).ranks, 1u);
  EXPECT_EQ(ar.hosts, 2u);
}

TEST(Verb, AlltoallCountsWhatGoesToAndComesFromOthers) {
  VerbCall c = call(Verb::kAlltoall, 0);
  c.send_to = {1, 2, 3, 4};
  c.recv_from = {10, 20, 30, 40};
  const LinkBytes one = link_bytes(c, one_host(1, 4));
  EXPECT_EQ(one.sent, 1u + 3 + 4);
  EXPECT_EQ(one.received, 10u + 30 + 40);
  const LinkBytes spread = link_bytes(c, two_hosts(1));  // host 1: ranks 1, 3
  EXPECT_EQ(spread.sent, 4u);
  EXPECT_EQ(spread.received, 40u);
  EXPECT_EQ(spread.efa, 10u + 30);  // the larger direction to host 0
  // A mesh pattern for the link model, as the estimate states an all-to-all.
  EXPECT_TRUE(one.all_to_all);
  EXPECT_TRUE(collective_traffic(one).all_to_all);
  EXPECT_FALSE(collective_traffic(link_bytes(call(Verb::kAllgather, 8), one_host(0, 4))).all_to_all);
}
