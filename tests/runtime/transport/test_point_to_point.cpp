// Point to point between forked ranks: messages larger than the ring, both ways at once, and a
// receive that names the wrong size. (Receives from any rank: test_p2p_any_source.cpp.)
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "runtime/Error.h"
#include "runtime/SharedHbm.h"
#include "runtime/transport/CollectiveTransport.h"
#include "forked_ranks.h"

using namespace nrtsim::transport;
using forked_ranks::InHbm;
using forked_ranks::run_ranks;
using forked_ranks::small_options;

TEST(PointToPoint, SendRecvLargerThanTheRingBothWays) {
  const auto codes = run_ranks(2, [](int rank, CollectiveTransport& t) {
    const int peer = 1 - rank;
    std::vector<int32_t> out(30'000), in(30'000, -1);  // 120 KB through a 4 KiB ring
    std::iota(out.begin(), out.end(), rank * 100'000);
    auto s = t.post_send(peer, 7, out.data(), out.size() * 4);
    auto r = t.post_recv(peer, 7, in.data(), in.size() * 4);
    t.wait(*s);
    t.wait(*r);
    for (size_t i = 0; i < in.size(); i += 997) REQUIRE(in[i] == peer * 100'000 + int32_t(i));
    // A receive that names the wrong size fails clearly on the receiver.
    std::vector<char> small(10), wrong(11);
    if (rank == 0) {
      t.wait(*t.post_send(1, 0, small.data(), small.size()));
    } else {
      bool threw = false;
      try {
        t.wait(*t.post_recv(0, 0, wrong.data(), wrong.size()));
      } catch (const nrtsim::Error& e) {
        threw = std::string(e.what()).find("expected 11 bytes") != std::string::npos;
      }
      REQUIRE(threw);
    }
    return true;
  });
  EXPECT_EQ(codes, std::vector<int>({0, 0}));
}

