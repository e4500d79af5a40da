// Large interpreter instructions split over partition ranges on worker threads: every task runs
// exactly once whoever claims it, results are bit-identical to one thread, concurrent callers
// and a child made by fork() still get every task run.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "test_util.h"

#include "runtime/nki/Interpreter.h"
#include "runtime/nki/PartitionWorkers.h"

namespace nrtsim::nki {
namespace {

// Restores the configured thread count when a test ends.
struct Threads {
  explicit Threads(int n) { set_partition_threads(n); }
  ~Threads() { set_partition_threads(0); }
};

bool each_task_once(int n, int threads) {
  std::vector<std::atomic<int>> ran(static_cast<size_t>(n));
  run_on_workers(n, threads, [&](int r) { ran[static_cast<size_t>(r)].fetch_add(1); });
  for (auto& r : ran) {
    if (r.load() != 1) return false;
  }
  return true;
}

TEST(NkiPartitionWorkers, EveryTaskRunsOnce) {
  for (int threads : {1, 2, 4, 8}) {
    for (int n : {1, 2, 3, 8, 31}) EXPECT_TRUE(each_task_once(n, threads)) << n << " " << threads;
  }
  // Two callers at once: one gets the workers, the other runs its tasks itself.
  std::atomic<bool> ok_a{true}, ok_b{true};
  std::thread a([&] {
    for (int i = 0; i < 200; ++i) ok_a = ok_a && each_task_once(8, 4);
  });
  std::thread b([&] {
    for (int i = 0; i < 200; ++i) ok_b = ok_b && each_task_once(8, 4);
  });
  a.join();
  b.join();
  EXPECT_TRUE(ok_a.load());
  EXPECT_TRUE(ok_b.load());
}

// Instructions back to back (the workers still spinning) and after pauses longer than the spin
// (the workers asleep), ranges of uneven length (a thread that finishes its own block takes from
// the back of another's): every range runs once and all have finished when run_on_workers
// returns, also for a task count that does not divide among the threads.
TEST(NkiPartitionWorkers, EveryRangeFinishesBeforeTheCallReturns) {
  for (int threads : {2, 3, 16}) {
    for (int i = 0; i < 300; ++i) {
      const int n = 1 + (i * 7) % 64;
      std::vector<std::atomic<int>> ran(static_cast<size_t>(n));
      run_on_workers(n, threads, [&](int r) {
        if (r % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20 * (r % 3)));
        ran[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(ran[static_cast<size_t>(r)].load(), 1) << threads << " " << n << " " << r;
      }
      if (i % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

// HBM [128, 1024] -> SBUF copy, exp, a row max and a scan, results back to HBM: each instruction
// is large enough to split.
Program lanes_program() {
  constexpr int64_t P = 128, F = 1024;
  auto view = [](int32_t buffer, int64_t parts, int64_t free) {
    View v;
    v.buffer = buffer;
    v.ndim = 2;
    v.shape[0] = parts;
    v.shape[1] = free;
    v.stride[0] = free;
    v.stride[1] = 1;
    return v;
  };
  auto buffer = [](Memory memory, int64_t elements, int32_t binding) {
    Buffer b;
    b.memory = memory;
    b.elements = elements;
    b.binding = binding;
    return b;
  };
  Program p;
  p.name = "lanes";
  p.buffers = {buffer(Memory::kHbm, P * F, 0), buffer(Memory::kHbm, P * F, 1),
               buffer(Memory::kHbm, P, 2),     buffer(Memory::kSbuf, P * F, -1),
               buffer(Memory::kSbuf, P * F, -1), buffer(Memory::kSbuf, P, -1)};
  p.buffers[0].poison = false;  // the input keeps its data
  auto add = [&](Opcode op, Engine engine, View dst, View a) {
    Instruction in;
    in.op = op;
    in.engine = engine;
    in.dst = dst;
    in.a = a;
    p.instructions.push_back(in);
    return &p.instructions.back();
  };
  add(Opcode::kDmaCopy, Engine::kDma, view(3, P, F), view(0, P, F));
  Instruction* exp = add(Opcode::kActivation, Engine::kScalar, view(4, P, F), view(3, P, F));
  exp->act = Act::kExp;
  exp->imm0 = 1.0;  // scale
  Instruction* reduce = add(Opcode::kTensorReduce, Engine::kVector, view(5, P, 1), view(4, P, F));
  reduce->alu0 = Alu::kMax;
  reduce->axes = 2;
  Instruction* scan = add(Opcode::kScan, Engine::kVector, view(3, P, F), view(4, P, F));
  scan->b = view(4, P, F);
  scan->alu0 = Alu::kMultiply;
  scan->alu1 = Alu::kAdd;
  scan->imm2 = 0.5;
  add(Opcode::kDmaCopy, Engine::kDma, view(1, P, F), view(3, P, F));
  add(Opcode::kDmaCopy, Engine::kDma, view(2, P, 1), view(5, P, 1));
  return p;
}

struct Outputs {
  std::vector<float> scan, peak;
};

Outputs run_lanes(const Executable& exe, const std::vector<float>& x) {
  Outputs o{std::vector<float>(x.size()), std::vector<float>(128)};
  std::vector<float> in = x;
  exe.run({{reinterpret_cast<uint8_t*>(in.data()), static_cast<int64_t>(in.size() * 4)},
           {reinterpret_cast<uint8_t*>(o.scan.data()), static_cast<int64_t>(o.scan.size() * 4)},
           {reinterpret_cast<uint8_t*>(o.peak.data()), static_cast<int64_t>(o.peak.size() * 4)}});
  return o;
}

std::vector<float> lanes_input() {
  std::vector<float> x(128 * 1024);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f) * 0.01f;
  return x;
}

TEST(NkiPartitionWorkers, SplitInstructionsMatchOneThreadBitForBit) {
  const Executable exe(lanes_program());
  const std::vector<float> x = lanes_input();
  Outputs one, many;
  {
    Threads t(1);
    const uint64_t before = split_instruction_count();
    one = run_lanes(exe, x);
    EXPECT_EQ(split_instruction_count(), before);
  }
  {
    Threads t(4);
    const uint64_t before = split_instruction_count();
    many = run_lanes(exe, x);
    EXPECT_GE(split_instruction_count() - before, 5u);  // every instruction but the [128, 1] copy
  }
  EXPECT_EQ(std::memcmp(one.scan.data(), many.scan.data(), one.scan.size() * 4), 0);
  EXPECT_EQ(std::memcmp(one.peak.data(), many.peak.data(), one.peak.size() * 4), 0);
  // and the plain reference: per row, the max of exp and the scan s = e * s + e from 0.5
  for (int p = 0; p < 128; p += 37) {
    float peak = -INFINITY, s = 0.5f;
    for (int k = 0; k < 1024; ++k) {
      const float e = std::exp(x[static_cast<size_t>(p * 1024 + k)]);
      peak = std::max(peak, e);
      s = e * s + e;
      EXPECT_EQ(many.scan[static_cast<size_t>(p * 1024 + k)], s) << p << "," << k;
    }
    EXPECT_EQ(many.peak[static_cast<size_t>(p)], peak) << p;
  }
}

TEST(NkiPartitionWorkers, AChildOfForkRunsSplitInstructions) {
  const Executable exe(lanes_program());
  const std::vector<float> x = lanes_input();
  Threads t(2);
  const Outputs parent = run_lanes(exe, x);  // the parent's workers exist now
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const uint64_t before = split_instruction_count();
    const Outputs o = run_lanes(exe, x);
    const bool same = std::memcmp(o.scan.data(), parent.scan.data(), o.scan.size() * 4) == 0;
    _exit(same && split_instruction_count() > before ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace nrtsim::nki
