// The kernel-launch path and the execution trace it feeds.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/KernelLaunch.h"
#include "runtime/Stream.h"

namespace {

using nrtsim::Engine;
using nrtsim::ExecutionTrace;
using nrtsim::KernelInfo;
using nrtsim::OpStats;

const OpStats* find_row(const std::vector<OpStats>& rows, const std::string& op) {
  for (const auto& row : rows) {
    if (row.op == op) return &row;
  }
  return nullptr;
}

TEST(EngineName, EveryEngineHasAName) {
  EXPECT_STREQ(nrtsim::engine_name(Engine::kTensor), "tensor");
  EXPECT_STREQ(nrtsim::engine_name(Engine::kVector), "vector");
  EXPECT_STREQ(nrtsim::engine_name(Engine::kScalar), "scalar");
  EXPECT_STREQ(nrtsim::engine_name(Engine::kGpSimd), "gpsimd");
  EXPECT_STREQ(nrtsim::engine_name(Engine::kDma), "dma");
}

TEST(ExecutionTrace, AggregatesPerOpInFirstLaunchOrder) {
  ExecutionTrace trace;
  EXPECT_TRUE(trace.snapshot().empty());
  EXPECT_EQ(trace.total_launches(), 0u);

  trace.record(KernelInfo{"aten::mm", 1000, 300, Engine::kTensor}, 10);
  trace.record(KernelInfo{"aten::add", 8, 24, Engine::kVector}, 5);
  trace.record(KernelInfo{"aten::mm", 2000, 600, Engine::kTensor}, 20);
  trace.record(KernelInfo{"aten::mm", 3000, 900, Engine::kTensor}, 30);

  const auto rows = trace.snapshot();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].op, "aten::mm");
  EXPECT_EQ(rows[0].engine, Engine::kTensor);
  EXPECT_EQ(rows[0].launches, 3u);
  EXPECT_EQ(rows[0].flops, 6000u);
  EXPECT_EQ(rows[0].bytes, 1800u);
  EXPECT_EQ(rows[0].host_nanoseconds, 60u);
  EXPECT_EQ(rows[1].op, "aten::add");
  EXPECT_EQ(rows[1].engine, Engine::kVector);
  EXPECT_EQ(rows[1].launches, 1u);
  EXPECT_EQ(rows[1].flops, 8u);
  EXPECT_EQ(rows[1].bytes, 24u);
  EXPECT_EQ(rows[1].host_nanoseconds, 5u);
  EXPECT_EQ(trace.total_launches(), 4u);
}

TEST(ExecutionTrace, DifferentPointersWithTheSameNameShareARow) {
  // Two distinct buffers holding the same text, as two interned copies of a name would be.
  static const char first[] = "custom::op";
  static const char second[] = "custom::op";
  ASSERT_NE(static_cast<const void*>(first), static_cast<const void*>(second));
  ExecutionTrace trace;
  trace.record(KernelInfo{first, 1, 2, Engine::kScalar}, 3);
  trace.record(KernelInfo{"other::op", 0, 0, Engine::kGpSimd}, 0);
  trace.record(KernelInfo{second, 10, 20, Engine::kScalar}, 30);
  trace.record(KernelInfo{second, 100, 200, Engine::kScalar}, 300);
  trace.record(KernelInfo{first, 1000, 2000, Engine::kScalar}, 3000);

  const auto rows = trace.snapshot();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].op, "custom::op");
  EXPECT_EQ(rows[0].launches, 4u);
  EXPECT_EQ(rows[0].flops, 1111u);
  EXPECT_EQ(rows[0].bytes, 2222u);
  EXPECT_EQ(rows[0].host_nanoseconds, 3333u);
  EXPECT_EQ(rows[1].op, "other::op");
  EXPECT_EQ(rows[1].launches, 1u);
}

TEST(ExecutionTrace, ClearForgetsEverything) {
  ExecutionTrace trace;
  trace.record(KernelInfo{"aten::mul", 4, 4, Engine::kVector}, 1);
  trace.record(KernelInfo{"aten::div", 4, 4, Engine::kVector}, 1);
  trace.clear();
  EXPECT_TRUE(trace.snapshot().empty());
  EXPECT_EQ(trace.total_launches(), 0u);
  // Recording after a clear starts fresh rows, in the new first-launch order.
  trace.record(KernelInfo{"aten::div", 7, 9, Engine::kVector}, 2);
  trace.record(KernelInfo{"aten::mul", 1, 1, Engine::kVector}, 1);
  const auto rows = trace.snapshot();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].op, "aten::div");
  EXPECT_EQ(rows[0].launches, 1u);
  EXPECT_EQ(rows[0].flops, 7u);
  EXPECT_EQ(rows[0].bytes, 9u);
  EXPECT_EQ(rows[1].op, "aten::mul");
}

TEST(ExecutionTrace, ConcurrentRecordsAreAllCounted) {
  ExecutionTrace trace;
  constexpr int kThreads = 4, kPerThread = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const char* op = t % 2 == 0 ? "even::op" : "odd::op";
      for (int i = 0; i < kPerThread; ++i) trace.record(KernelInfo{op, 2, 3, Engine::kVector}, 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(trace.total_launches(), uint64_t{kThreads * kPerThread});
  const auto rows = trace.snapshot();
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_EQ(row.launches, uint64_t{kThreads / 2 * kPerThread}) << row.op;
    EXPECT_EQ(row.flops, uint64_t{2 * kThreads / 2 * kPerThread}) << row.op;
  }
}

TEST(Launch, RunsTheBodyOnTheStreamAndRecordsItGlobally) {
  ExecutionTrace::global().clear();
  nrtsim::Stream stream(0, 0, 0);
  std::vector<float> a{1, 2, 3}, b{10, 20, 30}, c(3);
  const KernelInfo info{"test::vector_add", 3, 36, Engine::kVector};
  bool inside_stream_work = false;
  nrtsim::launch(stream, info, [&] {
    inside_stream_work = !stream.query();
    for (size_t i = 0; i < c.size(); ++i) c[i] = a[i] + b[i];
  });
  EXPECT_EQ(c, (std::vector<float>{11, 22, 33}));
  EXPECT_TRUE(inside_stream_work);
  EXPECT_EQ(stream.submitted(), 1u);
  EXPECT_TRUE(stream.query());
  nrtsim::launch(stream, info, [&] {});

  const auto rows = ExecutionTrace::global().snapshot();
  const OpStats* row = find_row(rows, "test::vector_add");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->launches, 2u);
  EXPECT_EQ(row->flops, 6u);
  EXPECT_EQ(row->bytes, 72u);
  EXPECT_EQ(row->engine, Engine::kVector);
  EXPECT_EQ(ExecutionTrace::global().total_launches(), 2u);
  ExecutionTrace::global().clear();
  EXPECT_EQ(ExecutionTrace::global().total_launches(), 0u);
}

TEST(Launch, AFailingKernelPropagatesAndIsNotRecorded) {
  ExecutionTrace::global().clear();
  nrtsim::Stream stream(0, 0, 0);
  EXPECT_THROW(nrtsim::launch(stream, KernelInfo{"test::fails", 1, 1, Engine::kScalar},
                              [] { throw std::runtime_error("bad"); }),
               std::runtime_error);
  EXPECT_EQ(find_row(ExecutionTrace::global().snapshot(), "test::fails"), nullptr);
  EXPECT_TRUE(stream.query());
  ExecutionTrace::global().clear();
}

}  // namespace
