// The collective algorithms between real processes, on both paths (the slots, and the peers'
// device memory mapped read-only): each test forks its ranks, every rank checks its results
// against values computed locally, and the parent collects the verdicts through exit codes.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
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

float value(int rank, size_t i) { return static_cast<float>((rank + 1) * 0.5 + (i % 97) * 0.25); }

// Every collective with a mapped path, on buffers whose sizes do not divide by the group size;
// each result checked exactly against the same arithmetic done here (reductions combine in rank
// order on both paths). `Alloc` places the buffers: private memory (std::allocator) or this
// process's device memory file (InHbm).
template <template <class> class Alloc = std::allocator>
bool workload(int rank, CollectiveTransport& t) {
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
  // scatter from the last rank: rank r gets part n-1-r of the root's buffer.
  std::vector<int32_t, Alloc<int32_t>> to_scatter(part * n), scattered(part, -1);
  for (size_t i = 0; i < to_scatter.size(); ++i) to_scatter[i] = static_cast<int32_t>(i);
  std::vector<const void*> pieces(n);
  for (int r = 0; r < n; ++r) pieces[r] = to_scatter.data() + (n - 1 - r) * part;
  t.scatter(pieces.data(), scattered.data(), part * 4, n - 1);
  for (size_t i = 0; i < part; i += 13) {
    REQUIRE(scattered[i] == static_cast<int32_t>((n - 1 - rank) * part + i));
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


// Every buffer of an operation in mapped memory from the first byte: the mapped path for all.
TransportOptions mapped_options() {
  auto o = small_options();
  o.mapped_min_bytes = 0;
  return o;
}

constexpr uint64_t kWorkloadCollectives = 10;  // workload()'s, barrier aside

}  // namespace

TEST(Algorithms, AllreduceBroadcastAllgatherAcrossManySteps) {
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

TEST(Algorithms, LargeChunksSplitTheReductionAcrossRanks) {
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

TEST(Algorithms, ReduceScatterAlltoallGatherScatter) {
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

TEST(Algorithms, Bfloat16SumRoundsOnceAndBoolOr) {
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

TEST(Algorithms, MismatchedSizesFailOnEveryRank) {
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


TEST(Algorithms, MappedDeviceMemoryGivesExactResults) {
  const auto codes = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        if (!t.mapped_hbm()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, t.mapped_hbm_status().c_str());
          return false;
        }
        REQUIRE(workload<InHbm>(rank, t));
        REQUIRE(t.mapped_ops() == kWorkloadCollectives);
        // Again on the same kind of buffers (the peers' mappings of freed buffers are stale now
        // and must not be used for the new ones).
        REQUIRE(workload<InHbm>(rank, t));
        REQUIRE(t.mapped_ops() == 2 * kWorkloadCollectives);
        // Private buffers cannot be mapped: every rank sees that in the published table and the
        // group takes the slots, with the same results.
        REQUIRE(workload<std::allocator>(rank, t));
        REQUIRE(t.mapped_ops() == 2 * kWorkloadCollectives);
        return true;
      },
      mapped_options());
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(Algorithms, MappedPathFallsBackTogetherWhenOneRanksBuffersArePrivate) {
  // Rank 1's buffers are private, the others' mapped: all ranks must still agree on one path per
  // operation, or they would wait for each other at different barriers. Only the operations in
  // which nobody reads rank 1's buffers stay mapped: broadcast and scatter from another root.
  const auto codes = run_ranks(
      3,
      [](int rank, CollectiveTransport& t) {
        REQUIRE(t.mapped_hbm());
        const bool ok = rank == 1 ? workload<std::allocator>(rank, t) : workload<InHbm>(rank, t);
        REQUIRE(ok);
        REQUIRE(t.mapped_ops() == 3);  // the bf16 check's broadcast from 0, broadcast and
                                       // scatter from rank 2
        return true;
      },
      mapped_options());
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(Algorithms, SlotPathGivesTheSameResultsWhenMappedMemoryIsOff) {
  auto o = mapped_options();
  o.mapped = false;
  const auto codes = run_ranks(
      4,
      [](int rank, CollectiveTransport& t) {
        REQUIRE(!t.mapped_hbm());
        REQUIRE(workload<InHbm>(rank, t));
        REQUIRE(t.mapped_ops() == 0);
        return true;
      },
      o);
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0, 0}));
}

TEST(Algorithms, RootsOutsideTheGroupAreRefusedOnEveryRank) {
  const auto codes = run_ranks(2, [](int, CollectiveTransport& t) {
    std::vector<float> v(4, 1.0f);
    int refused = 0;
    const auto expect_refusal = [&](const std::function<void()>& call, const char* verb) {
      try {
        call();
      } catch (const nrtsim::Error& e) {
        const std::string m = e.what();
        refused += m.find(std::string(verb) + ": invalid root rank") != std::string::npos;
      }
    };
    void* outs[2] = {v.data(), v.data()};
    const void* ins[2] = {v.data(), v.data()};
    expect_refusal([&] { t.broadcast(v.data(), 16, 999); }, "broadcast");
    expect_refusal([&] { t.broadcast(v.data(), 16, 2); }, "broadcast");
    expect_refusal([&] { t.reduce(v.data(), 4, DType::kFloat32, ReduceOp::kSum, 3); }, "reduce");
    expect_refusal([&] { t.gather(v.data(), outs, 4, -2); }, "gather");
    expect_refusal([&] { t.scatter(ins, v.data(), 4, 3); }, "scatter");
    REQUIRE(refused == 5);
    REQUIRE(v[0] == 1.0f);  // nothing touched
    // The group is still usable.
    t.allreduce(v.data(), 4, DType::kFloat32, ReduceOp::kSum);
    return v[3] == 2.0f;
  });
  EXPECT_EQ(codes, std::vector<int>({0, 0}));
}

// The transport never needs the right to attach to a peer: with cross-memory attach and
// PR_SET_PTRACER forbidden by a seccomp filter (the process dies if it tries either), every
// collective still runs, on mapped memory and on the slots.
TEST(Algorithms, NoRankNeedsCrossMemoryAttachOrWidensWhoMayTraceIt) {
  const pid_t child = ::fork();
  if (child == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_prctl, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PR_SET_PTRACER, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      std::perror("seccomp");
      ::_exit(3);
    }
    const auto codes = run_ranks(
        3,
        [](int rank, CollectiveTransport& t) {
          REQUIRE(t.mapped_hbm());
          REQUIRE(workload<InHbm>(rank, t));
          REQUIRE(workload<std::allocator>(rank, t));
          return t.mapped_ops() == kWorkloadCollectives;
        },
        mapped_options());
    ::_exit(codes == std::vector<int>({0, 0, 0}) ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status)
                                 << " (SIGSYS: a forbidden syscall)";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
