// The launch path: one record per launch, its observers, and the simulated clock it advances.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "runtime/Event.h"
#include "runtime/Launch.h"
#include "runtime/LaunchTotals.h"

namespace {

using nrtsim::Engine;
using nrtsim::LaunchKind;
using nrtsim::LaunchRecord;
using nrtsim::Precision;
using nrtsim::Work;
using nrtsim::testing::test_core;

// Keeps every record it sees while registered.
struct Recorder final : nrtsim::LaunchObserver {
  Recorder() { nrtsim::add_observer(this); }
  ~Recorder() override { nrtsim::remove_observer(this); }
  void on_launch(const LaunchRecord& r) override { records.push_back(r); }
  std::vector<LaunchRecord> records;
};

Work tensor_work(uint64_t flops, uint64_t read, uint64_t written, Precision p) {
  Work w;
  w[Engine::kTensor] = {flops, read, written};
  w.precision = p;
  return w;
}

TEST(EngineName, EveryEngineHasAName) {
  EXPECT_STREQ(nrtsim::engine_name(Engine::kTensor), "tensor");
  EXPECT_STREQ(nrtsim::engine_name(Engine::kVector), "vector");
  EXPECT_STREQ(nrtsim::engine_name(Engine::kScalar), "scalar");
  EXPECT_STREQ(nrtsim::engine_name(Engine::kGpSimd), "gpsimd");
  EXPECT_STREQ(nrtsim::engine_name(Engine::kDma), "dma");
}

TEST(Intern, SameTextSamePointer) {
  const std::string a = "custom::op";
  const std::string b = "custom::op";
  EXPECT_EQ(nrtsim::intern(a), nrtsim::intern(b));
  EXPECT_NE(nrtsim::intern(a), nrtsim::intern("custom::other"));
  EXPECT_STREQ(nrtsim::intern(a), "custom::op");
}

TEST(Launch, OneRecordWithEverythingFilledIn) {
  nrtsim::NeuronCore& core = test_core(2);
  nrtsim::Stream& stream = core.stream(5);
  Recorder recorder;
  bool ran = false;
  {
    const nrtsim::CorrelationScope correlation(42);
    nrtsim::launch(stream, "test::mm", LaunchKind::kKernel,
                   tensor_work(1000, 300, 100, Precision::kBf16), [&] { ran = true; });
  }
  EXPECT_TRUE(ran);
  ASSERT_EQ(recorder.records.size(), 1u);
  const LaunchRecord& r = recorder.records[0];
  EXPECT_STREQ(r.op, "test::mm");
  EXPECT_EQ(r.kind, LaunchKind::kKernel);
  EXPECT_EQ(r.device, 2);
  EXPECT_EQ(r.stream, 5u);
  EXPECT_EQ(r.correlation_id, 42u);
  EXPECT_EQ(r.work[Engine::kTensor].ops, 1000u);
  EXPECT_EQ(r.work.bytes_read(), 300u);
  EXPECT_EQ(r.work.bytes_written(), 100u);
  EXPECT_EQ(r.work.main_engine(), Engine::kTensor);
  EXPECT_LE(r.host_begin_ns, r.host_end_ns);
  // Duration: the fixed launch cost plus the busiest engine, as the core's model says.
  const auto& model = core.clock().model();
  const double tensor_ns = 1000 / model.tensor_flops_per_ns(Precision::kBf16);
  const double dma_ns = 400 / model.hbm_bytes_per_ns();
  EXPECT_DOUBLE_EQ(r.engine_busy_ns[nrtsim::index_of(Engine::kTensor)], tensor_ns);
  EXPECT_DOUBLE_EQ(r.engine_busy_ns[nrtsim::index_of(Engine::kDma)], dma_ns);
  EXPECT_DOUBLE_EQ(r.sim_duration_ns(),
                   model.fixed_cost_ns(LaunchKind::kKernel) + std::max(tensor_ns, dma_ns));
  EXPECT_EQ(nrtsim::current_correlation_id(), 0u);  // the scope restored it
}

TEST(Launch, NoObserverNoPublication) {
  nrtsim::Stream& stream = test_core(0).default_stream();
  std::vector<LaunchRecord> seen;
  {
    Recorder recorder;
    nrtsim::launch(stream, "test::a", LaunchKind::kKernel, Work{}, [] {});
    EXPECT_EQ(recorder.records.size(), 1u);
  }
  // Removed: a later launch reaches nobody, and nothing is registered.
  EXPECT_FALSE(nrtsim::has_observers());
  nrtsim::launch(stream, "test::b", LaunchKind::kKernel, Work{}, [] {});
}

TEST(Launch, AThrowingBodyYieldsNoRecordAndTheStreamStaysUsable) {
  nrtsim::Stream& stream = test_core(0).pool_stream(0);
  Recorder recorder;
  EXPECT_THROW(nrtsim::launch(stream, "test::fails", LaunchKind::kKernel, Work{},
                              [] { throw std::runtime_error("boom"); }),
               std::runtime_error);
  EXPECT_TRUE(recorder.records.empty());
  nrtsim::launch(stream, "test::works", LaunchKind::kKernel, Work{}, [] {});
  ASSERT_EQ(recorder.records.size(), 1u);
  EXPECT_STREQ(recorder.records[0].op, "test::works");
}

TEST(Launch, WorkIsReadAfterTheBody) {
  nrtsim::Stream& stream = test_core(1).default_stream();
  Recorder recorder;
  Work work;
  nrtsim::launch(stream, "test::fresh", LaunchKind::kKernel, work,
                 [&] { work[Engine::kVector].bytes_written = 64; });
  ASSERT_EQ(recorder.records.size(), 1u);
  EXPECT_EQ(recorder.records[0].work[Engine::kVector].bytes_written, 64u);
}

TEST(SimClock, OneStreamRunsInOrder) {
  nrtsim::Stream& stream = test_core(3).pool_stream(0);
  Recorder recorder;
  for (int i = 0; i < 3; ++i) {
    nrtsim::launch(stream, "test::k", LaunchKind::kKernel,
                   tensor_work(1u << 30, 0, 0, Precision::kBf16), [] {});
  }
  ASSERT_EQ(recorder.records.size(), 3u);
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(recorder.records[i].sim_begin_ns, recorder.records[i - 1].sim_end_ns);
  }
}

TEST(SimClock, TwoStreamsOverlapOnDifferentEnginesAndQueueOnOne) {
  const auto runtime = nrtsim::testing::fresh_runtime();  // clocks start at zero
  nrtsim::NeuronCore& core = runtime->core(0);
  nrtsim::Stream& a = core.pool_stream(0);
  nrtsim::Stream& b = core.pool_stream(0);
  Recorder recorder;
  Work vector_only;
  vector_only[Engine::kVector].ops = 1u << 24;
  nrtsim::launch(a, "test::tensor", LaunchKind::kKernel,
                 tensor_work(1ull << 36, 0, 0, Precision::kBf16), [] {});
  nrtsim::launch(b, "test::vector", LaunchKind::kKernel, vector_only, [] {});
  nrtsim::launch(b, "test::tensor2", LaunchKind::kKernel,
                 tensor_work(1ull << 36, 0, 0, Precision::kBf16), [] {});
  ASSERT_EQ(recorder.records.size(), 3u);
  const auto& t1 = recorder.records[0];
  const auto& v = recorder.records[1];
  const auto& t2 = recorder.records[2];
  EXPECT_DOUBLE_EQ(t1.sim_begin_ns, 0);
  EXPECT_DOUBLE_EQ(v.sim_begin_ns, 0);  // another stream, another engine: runs alongside
  EXPECT_GE(t2.sim_begin_ns, t1.sim_end_ns - 1e-6);  // the tensor engine is busy until then
  EXPECT_DOUBLE_EQ(core.clock().now_ns(), t2.sim_end_ns);
  const auto busy = core.clock().busy_totals_ns();
  EXPECT_DOUBLE_EQ(busy[nrtsim::index_of(Engine::kTensor)],
                   t1.engine_busy_ns[0] + t2.engine_busy_ns[0]);
}

TEST(SimClock, EventsMeasureModelledTimeAndOrderStreams) {
  const auto runtime = nrtsim::testing::fresh_runtime();
  nrtsim::NeuronCore& core = runtime->core(1);
  nrtsim::Stream& a = core.pool_stream(0);
  nrtsim::Stream& b = core.pool_stream(-1);
  nrtsim::Event start(true), end(true);
  start.record(a);
  const Work gemm = tensor_work(2ull * 4096 * 4096 * 4096, 0, 0, Precision::kBf16);
  Recorder recorder;
  nrtsim::launch(a, "test::gemm", LaunchKind::kKernel, gemm, [] {});
  end.record(a);
  const double expected_ms = recorder.records.at(0).sim_duration_ns() / 1e6;
  EXPECT_DOUBLE_EQ(start.elapsed_ms(end), expected_ms);
  EXPECT_GE(start.host_elapsed_ms(end), 0.0);
  // b waits for `end`: its next launch starts no earlier than the GEMM's end.
  end.block(b);
  nrtsim::launch(b, "test::after", LaunchKind::kKernel, Work{}, [] {});
  EXPECT_GE(recorder.records.at(1).sim_begin_ns, recorder.records.at(0).sim_end_ns);
}

TEST(SimClock, HostFallbackChargesItsOwnHostTimeNotItsNestedLaunches) {
  nrtsim::Stream& stream = test_core(2).default_stream();
  Recorder recorder;
  nrtsim::launch(stream, "test::fallback", LaunchKind::kHostFallback, Work{}, [&] {
    nrtsim::launch(stream, "test::copy_in", LaunchKind::kCopyHostToDevice, Work{}, [] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
  });
  ASSERT_EQ(recorder.records.size(), 2u);
  const LaunchRecord& fallback = recorder.records[1];
  EXPECT_EQ(fallback.kind, LaunchKind::kHostFallback);
  // The nested copy's 20 ms of host time are not charged to the fallback again.
  EXPECT_LT(fallback.sim_duration_ns(), 15e6);
  EXPECT_GE(fallback.host_end_ns - fallback.host_begin_ns, 20'000'000);
}

TEST(LaunchTotals, AggregatesPerOpInFirstLaunchOrder) {
  nrtsim::LaunchTotals totals;
  nrtsim::add_observer(&totals);
  nrtsim::Stream& stream = test_core(0).default_stream();
  for (int i = 0; i < 3; ++i) {
    nrtsim::launch(stream, nrtsim::intern("test::mm"), LaunchKind::kKernel,
                   tensor_work(1000, 300, 100, Precision::kFp32), [] {});
    if (i == 0) {
      Work add;
      add[Engine::kVector] = {8, 64, 32};
      nrtsim::launch(stream, nrtsim::intern("test::add"), LaunchKind::kKernel, add, [] {});
    }
  }
  nrtsim::remove_observer(&totals);
  const auto rows = totals.snapshot();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].op, "test::mm");
  EXPECT_EQ(rows[0].launches, 3u);
  EXPECT_EQ(rows[0].ops[nrtsim::index_of(Engine::kTensor)], 3000u);
  EXPECT_EQ(rows[0].bytes_read, 900u);
  EXPECT_EQ(rows[0].bytes_written, 300u);
  EXPECT_EQ(rows[0].engine, Engine::kTensor);
  EXPECT_GT(rows[0].sim_ns, 0);
  EXPECT_EQ(rows[1].op, "test::add");
  EXPECT_EQ(rows[1].engine, Engine::kVector);
  EXPECT_EQ(totals.total_launches(), 4u);
  totals.clear();
  EXPECT_TRUE(totals.snapshot().empty());
}

TEST(LaunchTotals, ConcurrentLaunchesAreAllCounted) {
  nrtsim::LaunchTotals totals;
  nrtsim::add_observer(&totals);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      nrtsim::Stream& stream = test_core(t % 4).pool_stream(0);
      Work w;
      w[Engine::kScalar].ops = 2;
      for (int i = 0; i < kPerThread; ++i) {
        nrtsim::launch(stream, t % 2 ? "test::odd" : "test::even", LaunchKind::kKernel, w, [] {});
      }
    });
  }
  for (auto& th : threads) th.join();
  nrtsim::remove_observer(&totals);
  EXPECT_EQ(totals.total_launches(), uint64_t{kThreads * kPerThread});
  for (const auto& row : totals.snapshot()) {
    EXPECT_EQ(row.launches, uint64_t{kThreads / 2 * kPerThread}) << row.op;
    EXPECT_EQ(row.ops[nrtsim::index_of(Engine::kScalar)], uint64_t{2 * kThreads / 2 * kPerThread});
  }
}

}  // namespace
