// Health and abort: dead, hung and aborting peers become errors naming the rank on every other
// rank, quickly, never hangs; ranks that finished their part and left are not blamed.
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

namespace {

TransportOptions mapped_options() {
  auto o = small_options();
  o.mapped_min_bytes = 0;
  return o;
}

// Rank 2 dies 5 ms into `calls` allreduces of `data`: the others are reading its buffer (their
// mappings keep its pages) or waiting for it at a barrier; whichever, they must fail naming it.
bool allreduce_while_rank_2_dies(int rank, CollectiveTransport& t, float* data, size_t count,
                                 int calls) {
  if (rank == 2) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ::_exit(0);
    }).detach();
  }
  try {
    for (int i = 0; i < calls; ++i) t.allreduce(data, count, DType::kFloat32, ReduceOp::kSum);
  } catch (const nrtsim::Error& e) {
    const std::string m = e.what();
    if (m.find("rank 2") != std::string::npos && m.find("exited") != std::string::npos) {
      return true;
    }
    std::fprintf(stderr, "rank %d: unexpected error: %s\n", rank, m.c_str());
  }
  return false;
}

}  // namespace

TEST(Health, DeadPeerFailsTheOthersQuicklyAndHungPeerTimesOut) {
  auto o = small_options();
  o.timeout = std::chrono::milliseconds(20'000);
  const auto start = std::chrono::steady_clock::now();
  const auto codes = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        if (rank == 2) ::_exit(0);  // dies without a word
        try {
          t.barrier();
        } catch (const nrtsim::Error& e) {
          const std::string m = e.what();
          return m.find("rank 2") != std::string::npos && m.find("exited") != std::string::npos;
        }
        return false;
      },
      o);
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  o.timeout = std::chrono::milliseconds(1'000);
  const auto hung = run_ranks(
      2,
      [](int rank, CollectiveTransport& t) {
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2'500));
          return true;
        }
        try {
          t.barrier();
        } catch (const nrtsim::Error& e) {
          return std::string(e.what()).find("timed out after 1000 ms") != std::string::npos;
        }
        return false;
      },
      o);
  EXPECT_EQ(hung, std::vector<int>({0, 0}));
}

// A rank that has done its part may exit at once, while a slower peer is still waiting: the
// peer must not take that exit for a death. (Checking "still awaited?" and "exited?" one after the
// other once blamed a rank that arrived and exited in between; a race, so many rounds.)
TEST(Health, RanksThatFinishTheirPartAndExitAtOnceAreNotBlamed) {
  for (int round = 0; round < 300; ++round) {
    const auto codes = run_ranks(3, [round](int rank, CollectiveTransport& t) {
      // The group's start is a barrier too; the ranks take turns being last.
      if (rank == round % 3) std::this_thread::yield();
      t.barrier();
      if (rank == 0) {
        std::vector<int32_t> in(1, 0);
        t.wait(*t.post_recv(1, 0, in.data(), 4));
        bool all = in[0] == 7;
        for (int k = 0; k < 2; ++k) {
          in[0] = 0;
          t.wait(*t.post_recv_any(1, in.data(), 4));
          all = all && in[0] == 7;
        }
        return all;
      }
      std::vector<int32_t> out(1, 7);
      t.wait(*t.post_send(0, rank == 1 ? 0 : 1, out.data(), 4));
      if (rank == 1) t.wait(*t.post_send(0, 1, out.data(), 4));
      return true;
    });
    ASSERT_EQ(codes, std::vector<int>({0, 0, 0})) << "round " << round;
  }
}

TEST(Health, MappedPathDeadPeerFailsTheOthersNamingIt) {
  auto o = mapped_options();
  o.timeout = std::chrono::milliseconds(20'000);
  const auto start = std::chrono::steady_clock::now();
  const auto dead = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        std::vector<float, InHbm<float>> v(4u << 20, 1.0f);  // 16 MiB
        return allreduce_while_rank_2_dies(rank, t, v.data(), v.size(), 50);
      },
      o);
  EXPECT_EQ(dead, std::vector<int>({0, 0, 0}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}


TEST(Health, AnAbortOnOneRankFailsEveryOtherRanksWaitWithItsReason) {
  const auto codes = run_ranks(3, [](int rank, CollectiveTransport& t) {
    if (rank == 1) {
      t.abort("rank 1 gave up on purpose");
      REQUIRE(t.aborted());
    }
    try {
      t.barrier();
    } catch (const nrtsim::Error& e) {
      const std::string m = e.what();
      REQUIRE(m.find("aborted by rank 1: rank 1 gave up on purpose") != std::string::npos);
      // Every later call fails at once with the same reason.
      try {
        float x = 1;
        t.allreduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
      } catch (const nrtsim::Error& again) {
        return std::string(again.what()).find("gave up on purpose") != std::string::npos;
      }
    }
    return false;
  });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}
