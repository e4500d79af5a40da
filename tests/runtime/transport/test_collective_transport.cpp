// The shared-memory collective transport between real processes: each test forks its ranks,
// every rank checks its results against values computed locally, and the parent collects the
// children's verdicts through their exit codes.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
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

namespace {

TransportOptions small_options() {
  TransportOptions o;
  o.slot_bytes = 64 << 10;  // small, so that the tests cross many steps
  o.channel_bytes = 4096;
  o.timeout = std::chrono::milliseconds(10'000);
  return o;
}

// Runs body(rank, transport) in `size` processes; returns the exit codes of ranks 0..size-1.
// `setup(rank)` runs in each child rank before it connects.
std::vector<int> run_ranks(int size, const std::function<bool(int, CollectiveTransport&)>& body,
                           TransportOptions o = small_options(),
                           const std::function<void(int)>& setup = {}) {
  return forked_ranks::run("nrtsim-test", size, body, o, setup);
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

// A rank that has done its part may exit at once, while a slower peer is still waiting: the
// peer must not take that exit for a death. (Checking "still awaited?" and "exited?" one after the
// other once blamed a rank that arrived and exited in between; a race, so many rounds.)
TEST(CollectiveTransport, RanksThatFinishTheirPartAndExitAtOnceAreNotBlamed) {
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

namespace {

// Empty when this machine lets a process read and write a sibling's memory with cross-memory
// attach (a container's seccomp profile may not); otherwise why not.
std::string cma_unavailable() {
  static uint64_t word = 42;
  int ready[2];
  if (::pipe(ready) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child == 0) {
    ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  (void)!::read(ready[0], &c, 1);
  uint64_t got = 0;
  iovec local{&got, sizeof(got)}, remote{&word, sizeof(word)};
  std::string why;
  if (::process_vm_readv(child, &local, 1, &remote, 1, 0) != sizeof(got) ||
      ::process_vm_writev(child, &local, 1, &remote, 1, 0) != sizeof(got)) {
    why = std::string("process_vm_readv/writev: ") + std::strerror(errno);
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  return why;
}

// Buffers in this process's device memory file, where HbmAllocator puts large device tensors.
template <class T>
struct InHbm {
  using value_type = T;
  InHbm() = default;
  template <class U>
  InHbm(const InHbm<U>&) {}
  T* allocate(size_t n) {
    void* p = nrtsim::SharedHbm::instance().allocate(n * sizeof(T));
    return static_cast<T*>(p ? p : ::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t) {
    if (!nrtsim::SharedHbm::instance().release(p)) ::operator delete(p);
  }
  bool operator==(const InHbm&) const { return true; }
  bool operator!=(const InHbm&) const { return false; }
};

// Every collective with a single-copy path, on buffers whose sizes do not divide by the group
// size or the copy block; each result checked exactly against the same arithmetic done here
// (reductions combine in rank order on both paths). `Alloc` places the buffers: private memory
// (std::allocator) or this process's device memory file (InHbm).
template <template <class> class Alloc = std::allocator>
bool single_copy_workload(int rank, CollectiveTransport& t) {
  const int n = t.size();
  const size_t count = 300'001;  // 1.2 MB of float: several cache blocks per rank's chunk
  std::vector<float, Alloc<float>> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = value(rank, i);
  t.allreduce(data.data(), count, DType::kFloat32, ReduceOp::kSum);
  for (size_t i = 0; i < count; ++i) {
    float expected = value(0, i);
    for (int r = 1; r < n; ++r) expected += value(r, i);
    REQUIRE(data[i] == expected);
  }
  // bf16 sums round once, the same on every rank: compare every rank's bits with rank 0's.
  std::vector<uint16_t, Alloc<uint16_t>> bf(70'001, static_cast<uint16_t>(0x3f80 + rank));
  t.allreduce(bf.data(), bf.size(), DType::kBFloat16, ReduceOp::kSum);
  std::vector<uint16_t, Alloc<uint16_t>> bf0(bf);
  t.broadcast(bf0.data(), bf0.size() * 2, 0);
  REQUIRE(bf0 == bf);
  // reduce: only the root's buffer changes.
  std::vector<int64_t, Alloc<int64_t>> ints(100'003);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int64_t>(i % 5) + rank;
  t.reduce(ints.data(), ints.size(), DType::kInt64, ReduceOp::kMax, 1);
  for (size_t i = 0; i < ints.size(); i += 7) {
    REQUIRE(ints[i] == static_cast<int64_t>(i % 5) + (rank == 1 ? n - 1 : rank));
  }
  // broadcast from the last rank.
  std::vector<uint8_t, Alloc<uint8_t>> bytes(1'000'003, 0);
  if (rank == n - 1) std::iota(bytes.begin(), bytes.end(), 0);
  t.broadcast(bytes.data(), bytes.size(), n - 1);
  for (size_t i = 0; i < bytes.size(); i += 13) REQUIRE(bytes[i] == static_cast<uint8_t>(i));
  // all_gather in place (the input is this rank's part of the output, as FSDP calls it).
  const size_t part = 70'003;
  std::vector<int32_t, Alloc<int32_t>> gathered(part * n, -1);
  for (size_t i = 0; i < part; ++i) gathered[rank * part + i] = rank * 1'000'000 + int32_t(i);
  std::vector<void*> outs(n);
  for (int r = 0; r < n; ++r) outs[r] = gathered.data() + r * part;
  t.allgather(outs[rank], outs.data(), part * 4);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < part; i += 11) REQUIRE(gathered[r * part + i] == r * 1'000'000 + int32_t(i));
  }
  // gather to rank 0 only.
  std::vector<int32_t, Alloc<int32_t>> mine(part, rank + 5), at_root(part * n, -1);
  for (int r = 0; r < n; ++r) outs[r] = at_root.data() + r * part;
  t.gather(mine.data(), outs.data(), part * 4, 0);
  REQUIRE(at_root[part * n - 1] == (rank == 0 ? n - 1 + 5 : -1));
  // reduce_scatter, the output aliasing this rank's input part.
  std::vector<double, Alloc<double>> in(part * n);
  for (size_t i = 0; i < in.size(); ++i) in[i] = rank * 0.25 + static_cast<double>(i % 1000);
  std::vector<const void*> ins(n);
  for (int r = 0; r < n; ++r) ins[r] = in.data() + r * part;
  double* out = in.data() + rank * part;
  t.reduce_scatter(ins.data(), out, part, DType::kFloat64, ReduceOp::kSum);
  for (size_t i = 0; i < part; i += 17) {
    double expected = 0;
    for (int r = 0; r < n; ++r) expected += r * 0.25 + static_cast<double>((rank * part + i) % 1000);
    REQUIRE(out[i] == expected);
  }
  // Uneven alltoall: rank s sends (s + 2d + 1) * 40'001 bytes of (s, d) to rank d.
  std::vector<std::vector<uint8_t, Alloc<uint8_t>>> send(n), recv(n);
  std::vector<size_t> send_bytes(n), recv_bytes(n);
  std::vector<const void*> sp(n);
  std::vector<void*> rp(n);
  for (int d = 0; d < n; ++d) {
    send_bytes[d] = (rank + 2 * d + 1) * size_t{40'001};
    recv_bytes[d] = (d + 2 * rank + 1) * size_t{40'001};
    send[d].assign(send_bytes[d], static_cast<uint8_t>(rank * 16 + d));
    recv[d].assign(recv_bytes[d], 0xff);
    sp[d] = send[d].data();
    rp[d] = recv[d].data();
  }
  t.alltoall(sp.data(), send_bytes.data(), rp.data(), recv_bytes.data());
  for (int s = 0; s < n; ++s) {
    for (size_t i = 0; i < recv_bytes[s]; i += 997) REQUIRE(recv[s][i] == s * 16 + rank);
    REQUIRE(recv[s].back() == s * 16 + rank);
  }
  t.barrier();
  return true;
}

// Rank 2 dies 5 ms into `calls` allreduces of `data`: the others are reading its buffer, writing
// into it, or waiting for it at a barrier; whichever, they must fail naming it.
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

TEST(CollectiveTransport, SingleCopyPathGivesExactResults) {
  if (const std::string why = cma_unavailable(); !why.empty()) GTEST_SKIP() << why;
  auto o = small_options();
  o.single_copy = TransportOptions::SingleCopy::kOn;  // also with more ranks than CPUs
  o.single_copy_min_bytes = 0;  // every message, even the bf16 broadcast of one rank's bits
  const auto codes = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        if (!t.single_copy()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, t.single_copy_status().c_str());
          return false;
        }
        return single_copy_workload(rank, t);
      },
      o);
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(CollectiveTransport, SlotPathGivesTheSameResultsWhenSingleCopyIsOff) {
  auto o = small_options();
  o.single_copy = TransportOptions::SingleCopy::kOn;
  o.single_copy_min_bytes = 0;
  // One rank opting out turns it off for the group (every rank must take the same path).
  const auto codes = run_ranks(
      4,
      [](int, CollectiveTransport& t) {
        REQUIRE(!t.single_copy());
        REQUIRE(t.single_copy_status().find("disabled on rank 2") != std::string::npos);
        return single_copy_workload(t.rank(), t);
      },
      o, [](int rank) {
        if (rank == 2) ::setenv("NRTSIM_COLLECTIVE_SINGLE_COPY", "0", 1);
      });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0, 0}));
}

TEST(CollectiveTransport, SingleCopyFallsBackWhenTheKernelRefusesIt) {
  auto o = small_options();
  o.single_copy = TransportOptions::SingleCopy::kOn;
  o.single_copy_min_bytes = 0;
  // A container's seccomp profile that refuses cross-memory attach, in rank 1 only: nobody can
  // tell until it tries, so every rank probes and the group falls back to the slots.
  const auto codes = run_ranks(
      3,
      [](int, CollectiveTransport& t) {
        REQUIRE(!t.single_copy());
        REQUIRE(t.single_copy_status().find("rank 1 cannot reach the memory of rank 0") !=
                std::string::npos);
        REQUIRE(t.single_copy_status().find("not permitted") != std::string::npos);
        return single_copy_workload(t.rank(), t);
      },
      o, [](int rank) {
        if (rank != 1) return;
        sock_filter filter[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
        if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
          std::perror("seccomp");
          ::_exit(3);
        }
      });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(CollectiveTransport, SingleCopyMismatchAndDeadPeerFailClearly) {
  if (const std::string why = cma_unavailable(); !why.empty()) GTEST_SKIP() << why;
  auto o = small_options();
  o.single_copy = TransportOptions::SingleCopy::kOn;
  o.single_copy_min_bytes = 0;
  o.timeout = std::chrono::milliseconds(20'000);
  const auto mismatch = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        std::vector<float> v(rank == 1 ? 80'000 : 100'000, 1.0f);
        try {
          t.allreduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum);
        } catch (const nrtsim::Error& e) {
          REQUIRE(std::string(e.what()).find("rank 1: allreduce of 80000 float32") !=
                  std::string::npos);
          float x = static_cast<float>(rank);
          t.allreduce(&x, 1, DType::kFloat32, ReduceOp::kMax);
          return x == 2.0f;
        }
        return false;
      },
      o);
  EXPECT_EQ(mismatch, std::vector<int>({0, 0, 0}));

  // Rank 2 dies in the middle of a large allreduce: the others are reading its buffer, writing
  // into it, or waiting for it at a barrier; whichever, they fail naming it, well within the
  // timeout.
  const auto start = std::chrono::steady_clock::now();
  const auto dead = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        std::vector<float> v(16u << 20, 1.0f);  // 64 MiB: the copies take a while
        return allreduce_while_rank_2_dies(rank, t, v.data(), v.size(), 20);
      },
      o);
  EXPECT_EQ(dead, std::vector<int>({0, 0, 0}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

TEST(CollectiveTransport, AutoSingleCopyStaysOffWhenRanksOutnumberCpus) {
  if (const std::string why = cma_unavailable(); !why.empty()) GTEST_SKIP() << why;
  cpu_set_t cpus;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  const int n = CPU_COUNT(&cpus);
  const int ranks = std::min(n + 1, 8);  // 8: enough to tell, few processes
  const auto codes = run_ranks(ranks, [n, ranks](int, CollectiveTransport& t) {
    if (ranks > n) {
      REQUIRE(!t.single_copy());
      REQUIRE(t.single_copy_status().find("outnumber the " + std::to_string(n) + " CPUs") !=
              std::string::npos);
    } else {
      REQUIRE(t.single_copy());  // a host with more than 7 CPUs: auto turns it on
    }
    return true;
  });
  EXPECT_EQ(codes, std::vector<int>(ranks, 0));
}

// Mapped device memory: every rank maps the others' SharedHbm files, so collectives on buffers in
// them move with plain loads and stores. Cross-memory attach is kept out of it (threshold beyond
// any message), so what is not mapped must go through the slots.
TransportOptions mapped_only_options() {
  auto o = small_options();
  o.single_copy = TransportOptions::SingleCopy::kOn;
  o.single_copy_min_bytes = SIZE_MAX;
  o.mapped_min_bytes = 0;
  return o;
}

constexpr uint64_t kWorkloadCollectives = 9;  // single_copy_workload's, barrier aside

TEST(CollectiveTransport, MappedDeviceMemoryGivesExactResults) {
  const auto codes = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        if (!t.mapped_hbm()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, t.mapped_hbm_status().c_str());
          return false;
        }
        REQUIRE(single_copy_workload<InHbm>(rank, t));
        REQUIRE(t.mapped_ops() == kWorkloadCollectives);
        // Again on the same kind of buffers (the peers' mappings of freed buffers are stale now
        // and must not be used for the new ones).
        REQUIRE(single_copy_workload<InHbm>(rank, t));
        REQUIRE(t.mapped_ops() == 2 * kWorkloadCollectives);
        // Private buffers cannot be mapped: every rank sees that in the published table and the
        // group takes the slots, with the same results.
        REQUIRE(single_copy_workload<std::allocator>(rank, t));
        REQUIRE(t.mapped_ops() == 2 * kWorkloadCollectives);
        return true;
      },
      mapped_only_options());
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(CollectiveTransport, MappedPathFallsBackTogetherWhenOneRanksBuffersArePrivate) {
  // Rank 1's buffers are private, the others' mapped: all ranks must still agree on one path per
  // operation (the slots), or they would wait for each other at different barriers.
  const auto codes = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        REQUIRE(t.mapped_hbm());
        const bool ok = rank == 1 ? single_copy_workload<std::allocator>(rank, t)
                                  : single_copy_workload<InHbm>(rank, t);
        REQUIRE(ok);
        REQUIRE(t.mapped_ops() == 0);
        return true;
      },
      mapped_only_options());
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(CollectiveTransport, MappedDeviceMemoryOffOnOneRankIsOffForTheGroup) {
  const auto codes = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        REQUIRE(!t.mapped_hbm());
        REQUIRE(t.mapped_hbm_status().find("off on rank 2: off: NRTSIM_SHARED_HBM=0") !=
                std::string::npos);
        REQUIRE(single_copy_workload<InHbm>(rank, t));
        REQUIRE(t.mapped_ops() == 0);
        return true;
      },
      mapped_only_options(), [](int rank) {
        if (rank == 2) ::setenv("NRTSIM_SHARED_HBM", "0", 1);
      });
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(CollectiveTransport, MappedPathDeadPeerFailsTheOthersNamingIt) {
  auto o = mapped_only_options();
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

TEST(SharedHbm, AllocationsAreLocatedAndTheirPagesGoBackWhenFreed) {
  nrtsim::SharedHbm& hbm = nrtsim::SharedHbm::instance();
  EXPECT_EQ(hbm.allocate(nrtsim::SharedHbm::kMinBytes - 1), nullptr);  // small: private memory
  char* a = static_cast<char*>(hbm.allocate(100'000));
  char* b = static_cast<char*>(hbm.allocate(nrtsim::SharedHbm::kMinBytes));
  ASSERT_NE(a, nullptr) << hbm.status();
  ASSERT_NE(b, nullptr);
  const auto at = hbm.locate(a + 1000, 5000);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->alloc_bytes, 102'400u);  // rounded up to pages
  EXPECT_EQ(at->offset_in_alloc, 1000u);
  EXPECT_FALSE(hbm.locate(a + 100'000, 4096).has_value());  // runs past the allocation
  const auto bt = hbm.locate(b, 1);
  ASSERT_TRUE(bt.has_value());
  EXPECT_NE(bt->alloc_offset, at->alloc_offset);
  std::memset(a, 7, 100'000);
  EXPECT_TRUE(hbm.release(a));
  EXPECT_FALSE(hbm.locate(a, 1).has_value());
  EXPECT_FALSE(hbm.release(a));
  // A fresh allocation never takes a freed one's file offset (peers' mappings stay truthful).
  char* c = static_cast<char*>(hbm.allocate(100'000));
  ASSERT_NE(c, nullptr);
  EXPECT_GT(hbm.locate(c, 1)->alloc_offset, bt->alloc_offset);
  EXPECT_TRUE(hbm.release(b));
  EXPECT_TRUE(hbm.release(c));
}
