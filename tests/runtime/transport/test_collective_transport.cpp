// The shared-memory collective transport between real processes: each test forks its ranks,
// every rank checks its results against values computed locally, and the parent collects the
// children's verdicts through their exit codes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "runtime/Error.h"
#include "runtime/transport/CollectiveTransport.h"

using namespace nrtsim::transport;

namespace {

#define REQUIRE(cond)                                                                        \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "rank check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
      return false;                                                                          \
    }                                                                                        \
  } while (0)

TransportOptions small_options() {
  TransportOptions o;
  o.slot_bytes = 64 << 10;  // small, so that the tests cross many steps
  o.channel_bytes = 4096;
  o.timeout = std::chrono::milliseconds(10'000);
  return o;
}

std::unique_ptr<CollectiveTransport> connect(const std::string& name, int rank, int size,
                                             const TransportOptions& o) {
  if (rank == 0) return CollectiveTransport::create(name, size, o);
  // Rank 0 may not have created the segment yet (the backend layer orders this with its Store).
  for (int attempt = 0;; ++attempt) {
    try {
      return CollectiveTransport::join(name, rank, size, o);
    } catch (const nrtsim::Error&) {
      if (attempt > 2000) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

// Runs body(rank, transport) in `size` processes; returns the exit codes of ranks 0..size-1.
std::vector<int> run_ranks(int size, const std::function<bool(int, CollectiveTransport&)>& body,
                           TransportOptions o = small_options()) {
  const std::string name = ShmSegment::unique_name("nrtsim-test");
  std::vector<pid_t> children;
  for (int r = 1; r < size; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 1;
      try {
        auto t = connect(name, r, size, o);
        code = body(r, *t) ? 0 : 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 2;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  std::vector<int> codes(size, 0);
  try {
    auto t = connect(name, 0, size, o);
    codes[0] = body(0, *t) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank 0: %s\n", e.what());
    codes[0] = 2;
  }
  for (int r = 1; r < size; ++r) {
    int status = 0;
    ::waitpid(children[r - 1], &status, 0);
    codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
  }
  return codes;
}

float value(int rank, size_t i) { return static_cast<float>((rank + 1) * 0.5 + (i % 97) * 0.25); }

}  // namespace

TEST(CollectiveTransport, AllreduceBroadcastAllgatherAcrossManySteps) {
  const auto codes = run_ranks(3, [](int rank, CollectiveTransport& t) {
    const size_t n = 50'000;  // 200 KB of float: several steps of a 32 KiB half slot
    std::vector<float> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = value(rank, i);
    t.allreduce(data.data(), n, DType::kFloat32, ReduceOp::kSum);
    for (size_t i = 0; i < n; ++i) {
      // Summed in rank order in float, exactly as here.
      const float expected = (value(0, i) + value(1, i)) + value(2, i);
      REQUIRE(data[i] == expected);
    }
    std::vector<int64_t> ints(1000, rank + 1);
    t.allreduce(ints.data(), ints.size(), DType::kInt64, ReduceOp::kProduct);
    REQUIRE(ints[999] == 6);
    std::vector<uint8_t> bytes(70'000);
    if (rank == 2) std::iota(bytes.begin(), bytes.end(), 0);
    t.broadcast(bytes.data(), bytes.size(), 2);
    for (size_t i = 0; i < bytes.size(); ++i) REQUIRE(bytes[i] == static_cast<uint8_t>(i));
    std::vector<int32_t> mine(20'000, rank * 7);
    std::vector<std::vector<int32_t>> all(3, std::vector<int32_t>(20'000));
    void* outs[3] = {all[0].data(), all[1].data(), all[2].data()};
    t.allgather(mine.data(), outs, mine.size() * 4);
    for (int r = 0; r < 3; ++r) REQUIRE(all[r][19'999] == r * 7);
    t.barrier();
    return true;
  });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(CollectiveTransport, LargeChunksSplitTheReductionAcrossRanks) {
  // Half slots of 512 KiB: chunks above the direct-reduction size, so each rank reduces its
  // share and the shares are gathered; the last chunk is small and reduced whole.
  auto o = small_options();
  o.slot_bytes = 1 << 20;
  const auto codes = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        const size_t n = 300'001;  // 1.2 MB of float: two 512 KiB chunks and a small tail
        std::vector<float> data(n);
        for (size_t i = 0; i < n; ++i) data[i] = value(rank, i);
        t.allreduce(data.data(), n, DType::kFloat32, ReduceOp::kSum);
        for (size_t i = 0; i < n; ++i) {
          REQUIRE(data[i] == (value(0, i) + value(1, i)) + value(2, i));
        }
        std::vector<double> mine(n, rank + 1.0);
        t.reduce(mine.data(), n, DType::kFloat64, ReduceOp::kMax, 2);
        REQUIRE(mine[n - 1] == (rank == 2 ? 3.0 : rank + 1.0));
        return true;
      },
      o);
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(CollectiveTransport, ReduceScatterAlltoallGatherScatter) {
  const auto codes = run_ranks(4, [](int rank, CollectiveTransport& t) {
    const size_t n = 9'000;  // per rank: crosses steps of 8 KiB per rank
    std::vector<std::vector<int32_t>> ins(4, std::vector<int32_t>(n));
    for (int r = 0; r < 4; ++r) {
      for (size_t i = 0; i < n; ++i) ins[r][i] = static_cast<int32_t>(rank * 1000 + r * 10 + i);
    }
    const void* in_ptrs[4] = {ins[0].data(), ins[1].data(), ins[2].data(), ins[3].data()};
    std::vector<int32_t> out(n);
    t.reduce_scatter(in_ptrs, out.data(), n, DType::kInt32, ReduceOp::kMax);
    for (size_t i = 0; i < n; i += 101) REQUIRE(out[i] == static_cast<int32_t>(3000 + rank * 10 + i));
    // Uneven alltoall: rank s sends (s + d) * 3000 + 1 bytes to rank d.
    std::vector<std::vector<char>> send(4), recv(4);
    size_t send_bytes[4], recv_bytes[4];
    const void* sp[4];
    void* rp[4];
    for (int d = 0; d < 4; ++d) {
      send_bytes[d] = (rank + d) * 3000 + 1;
      recv_bytes[d] = (d + rank) * 3000 + 1;
      send[d].assign(send_bytes[d], static_cast<char>(rank * 16 + d));
      recv[d].assign(recv_bytes[d], 0);
      sp[d] = send[d].data();
      rp[d] = recv[d].data();
    }
    t.alltoall(sp, send_bytes, rp, recv_bytes);
    for (int s = 0; s < 4; ++s) {
      REQUIRE(recv[s].front() == static_cast<char>(s * 16 + rank));
      REQUIRE(recv[s].back() == static_cast<char>(s * 16 + rank));
    }
    std::vector<double> piece(5000, rank + 0.5);
    std::vector<std::vector<double>> gathered(4, std::vector<double>(5000, -1));
    void* gp[4] = {gathered[0].data(), gathered[1].data(), gathered[2].data(), gathered[3].data()};
    t.gather(piece.data(), gp, piece.size() * 8, 1);
    for (int r = 0; r < 4; ++r) REQUIRE(gathered[r][4999] == (rank == 1 ? r + 0.5 : -1));
    std::vector<double> got(5000);
    const void* scatter_in[4] = {gathered[3].data(), gathered[2].data(), gathered[1].data(),
                                 gathered[0].data()};
    t.scatter(scatter_in, got.data(), got.size() * 8, 1);
    REQUIRE(got[0] == 3 - rank + 0.5);
    return true;
  });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0, 0}));
}

TEST(CollectiveTransport, Bfloat16SumRoundsOnceAndBoolOr) {
  const auto codes = run_ranks(2, [](int rank, CollectiveTransport& t) {
    // 1 + 2^-8 is not a bfloat16, 1 + 2^-7 is: rank 0 holds 1, rank 1 holds 2^-8 (twice over,
    // as 2^-9 + 2^-9 would need two roundings). One rounding of 1 + 2^-8 ties to even: 1.
    uint16_t one = 0x3f80, small = 0x3b80;  // 1.0 and 2^-8
    std::vector<uint16_t> v(3, rank == 0 ? one : small);
    t.allreduce(v.data(), v.size(), DType::kBFloat16, ReduceOp::kSum);
    REQUIRE(v[0] == 0x3f80);
    std::vector<uint8_t> flags = {static_cast<uint8_t>(rank), 0, 1};
    t.allreduce(flags.data(), flags.size(), DType::kBool, ReduceOp::kSum);
    REQUIRE(flags[0] == 1 && flags[1] == 0 && flags[2] == 1);
    bool threw = false;
    try {
      float f = 1;
      t.allreduce(&f, 1, DType::kFloat32, ReduceOp::kBxor);
    } catch (const nrtsim::Error& e) {
      threw = std::string(e.what()).find("BXOR is not defined for float32") != std::string::npos;
    }
    REQUIRE(threw);
    return true;
  });
  EXPECT_EQ(codes, std::vector<int>({0, 0}));
}

TEST(CollectiveTransport, SendRecvLargerThanTheRingBothWays) {
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

TEST(CollectiveTransport, MismatchedSizesFailOnEveryRank) {
  const auto codes = run_ranks(3, [](int rank, CollectiveTransport& t) {
    std::vector<float> v(rank == 1 ? 8 : 10, 1.0f);
    try {
      t.allreduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum);
    } catch (const nrtsim::Error& e) {
      const std::string m = e.what();
      REQUIRE(m.find("rank 1: allreduce of 8 float32 elements") != std::string::npos);
      // The group stays usable after a mismatch that every rank saw.
      float x = static_cast<float>(rank);
      t.allreduce(&x, 1, DType::kFloat32, ReduceOp::kMax);
      REQUIRE(x == 2.0f);
      return true;
    }
    return false;
  });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(CollectiveTransport, DeadPeerFailsTheOthersQuicklyAndHungPeerTimesOut) {
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

TEST(CollectiveTransport, SegmentIsUnlinkedOnceEveryRankHasMappedIt) {
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
