// Receives from any rank (c10d's recvAnysource) over the shared-memory transport, between forked
// ranks: the sender is reported, per-pair order holds, tags select, and a receive no one can
// satisfy fails instead of hanging.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/Error.h"
#include "runtime/transport/CollectiveTransport.h"
#include "forked_ranks.h"

using namespace nrtsim::transport;

namespace {

TransportOptions options(int timeout_ms = 10'000) {
  TransportOptions o;
  o.slot_bytes = 64 << 10;
  o.channel_bytes = 4096;  // small: messages larger than the ring take several passes
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

// body(rank, transport) in `size` forked processes; the exit codes of ranks 0..size-1.
std::vector<int> run_ranks(int size, const std::function<bool(int, CollectiveTransport&)>& body,
                           const TransportOptions& o = options()) {
  return forked_ranks::run("nrtsim-any", size, body, o);
}

// Receives one int32 message of `n` elements with `tag` from any rank; returns the sender.
int recv_any(CollectiveTransport& t, uint64_t tag, std::vector<int32_t>& into) {
  auto r = t.post_recv_any(tag, into.data(), into.size() * 4);
  t.wait(*r);
  return r->peer();
}

}  // namespace

TEST(P2pAnySource, ReportsTheSenderKeepsPairOrderAndSelectsByTag) {
  const auto codes = run_ranks(3, [](int rank, CollectiveTransport& t) {
    constexpr size_t n = 3000;  // 12 KB: three passes through the 4 KiB ring
    std::vector<int32_t> go(1, 1);
    if (rank == 0) {
      // 1. Rank 2 sends first (rank 1 waits for our word): the first receive names rank 2.
      std::vector<int32_t> in(n, -1);
      REQUIRE(recv_any(t, 0, in) == 2);
      REQUIRE(in[0] == 2000 && in[n - 1] == 2000 + int32_t(n) - 1);
      t.wait(*t.post_send(1, 9, go.data(), 4));
      REQUIRE(recv_any(t, 0, in) == 1);
      REQUIRE(in[0] == 1000 && in[n - 1] == 1000 + int32_t(n) - 1);
      // 2. Two messages of one sender arrive in order, any-source or not.
      std::vector<int32_t> a(1), b(1), c(1);
      REQUIRE(recv_any(t, 4, a) == 1 && a[0] == 41);
      auto specific = t.post_recv(1, 4, b.data(), 4);
      t.wait(*specific);
      REQUIRE(b[0] == 42);
      // 3. Tags select: rank 1 sends tag 7, rank 2 tag 3; a receive of tag 3 takes rank 2's
      // whichever arrived first, and one of tag 7 takes rank 1's.
      t.wait(*t.post_send(1, 9, go.data(), 4));
      t.wait(*t.post_send(2, 9, go.data(), 4));
      REQUIRE(recv_any(t, 3, c) == 2 && c[0] == 3);
      REQUIRE(recv_any(t, 7, c) == 1 && c[0] == 7);
      // 4. A receive from any rank posted before a specific one takes the first message.
      auto any = t.post_recv_any(5, a.data(), 4);
      auto after = t.post_recv(2, 5, b.data(), 4);
      t.wait(*t.post_send(2, 9, go.data(), 4));
      t.wait(*after);
      t.wait(*any);
      REQUIRE(any->peer() == 2 && a[0] == 51 && b[0] == 52);
      // 5. A size that does not match the message fails clearly.
      std::vector<int32_t> wrong(2);
      try {
        recv_any(t, 6, wrong);
      } catch (const nrtsim::Error& e) {
        const std::string m = e.what();
        REQUIRE(m.find("a receive from any rank") != std::string::npos);
        REQUIRE(m.find("expected 8 bytes") != std::string::npos);
        return true;
      }
      return false;
    }
    std::vector<int32_t> out(n), word(1);
    for (size_t i = 0; i < n; ++i) out[i] = rank * 1000 + int32_t(i);
    if (rank == 1) t.wait(*t.post_recv(0, 9, word.data(), 4));
    t.wait(*t.post_send(0, 0, out.data(), out.size() * 4));
    if (rank == 1) {
      std::vector<int32_t> m1{41}, m2{42}, m7{7}, m6{6};
      auto s1 = t.post_send(0, 4, m1.data(), 4);
      auto s2 = t.post_send(0, 4, m2.data(), 4);
      t.wait(*s1);
      t.wait(*s2);
      t.wait(*t.post_recv(0, 9, word.data(), 4));
      t.wait(*t.post_send(0, 7, m7.data(), 4));
      t.wait(*t.post_send(0, 6, m6.data(), 4));
    } else {
      std::vector<int32_t> m3{3}, m51{51}, m52{52};
      t.wait(*t.post_recv(0, 9, word.data(), 4));
      t.wait(*t.post_send(0, 3, m3.data(), 4));
      t.wait(*t.post_recv(0, 9, word.data(), 4));
      auto s1 = t.post_send(0, 5, m51.data(), 4);
      auto s2 = t.post_send(0, 5, m52.data(), 4);
      t.wait(*s1);
      t.wait(*s2);
    }
    return true;
  });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(P2pAnySource, FailsWhenEveryOtherRankExitedAndAtTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto gone = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        if (rank != 0) return true;  // exit without sending
        std::vector<int32_t> in(1);
        try {
          recv_any(t, 0, in);
        } catch (const nrtsim::Error& e) {
          return std::string(e.what()).find("every other rank of the group exited") !=
                 std::string::npos;
        }
        return false;
      },
      options(20'000));
  EXPECT_EQ(gone, std::vector<int>({0, 0, 0}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  const auto hung = run_ranks(
      2,
      [](int rank, CollectiveTransport& t) {
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2'000));
          return true;
        }
        std::vector<int32_t> in(1);
        try {
          recv_any(t, 0, in);
        } catch (const nrtsim::Error& e) {
          return std::string(e.what()).find("timed out after 500 ms") != std::string::npos;
        }
        return false;
      },
      options(500));
  EXPECT_EQ(hung, std::vector<int>({0, 0}));
}
