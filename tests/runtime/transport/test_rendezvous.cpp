// Rendezvous and capability negotiation: the segment, who joins it, and what the group agrees
// it can use.
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

TEST(Rendezvous, SegmentIsUnlinkedOnceEveryRankHasMappedIt) {
  const std::string name = ShmSegment::unique_name("nrtsim-test");
  const pid_t child = ::fork();
  if (child == 0) {
    for (int i = 0; i < 2000; ++i) {
      try {
        auto t = CollectiveTransport::join(name, 1, 2, small_options());
        t->barrier();
        ::_exit(0);
      } catch (const nrtsim::Error&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    ::_exit(1);
  }
  auto t = CollectiveTransport::create(name, 2, small_options());
  struct stat st {};
  EXPECT_NE(::stat(("/dev/shm" + name).c_str(), &st), 0);
  t->barrier();
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(Rendezvous, MappedDeviceMemoryOffOnOneRankIsOffForTheGroup) {
  const auto codes = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        REQUIRE(!t.mapped_hbm());
        REQUIRE(t.mapped_hbm_status().find("off on rank 2: off: NRTSIM_SHARED_HBM=0") !=
                std::string::npos);
        std::vector<float, InHbm<float>> v(1 << 20, static_cast<float>(rank));
        t.allreduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum);
        REQUIRE(v[12345] == 3.0f);
        REQUIRE(t.mapped_ops() == 0);
        return true;
      },
      small_options(), [](int rank) {
        if (rank == 2) ::setenv("NRTSIM_SHARED_HBM", "0", 1);
      });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}


TEST(Rendezvous, EveryRankMapsEveryPeersDeviceMemoryWhenAllCan) {
  const auto codes = run_ranks(3, [](int, CollectiveTransport& t) {
    REQUIRE(t.mapped_hbm());
    return t.mapped_hbm_status() == "on";
  });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(Rendezvous, AJoinerOfAnotherGroupSizeIsRefused) {
  const std::string name = ShmSegment::unique_name("nrtsim-test");
  auto o = small_options();
  o.timeout = std::chrono::milliseconds(1'500);
  const pid_t child = ::fork();
  if (child == 0) {
    for (int i = 0; i < 2000; ++i) {
      try {
        CollectiveTransport::join(name, 1, 3, o);  // the group has 2 ranks
        ::_exit(1);
      } catch (const nrtsim::Error& e) {
        if (std::string(e.what()).find("is not the group of 3 ranks") != std::string::npos) {
          ::_exit(0);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    ::_exit(2);
  }
  // Rank 0 waits for a rank 1 that never joins its group: the timeout names it.
  std::string message;
  try {
    CollectiveTransport::create(name, 2, o);
  } catch (const nrtsim::Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("rank(s) 1 did not join the group's shared memory within the timeout"),
            std::string::npos)
      << message;
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
