// Stream ordering and bookkeeping, and events as markers in a stream's order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/Error.h"
#include "test_util.h"
#include "runtime/Event.h"
#include "runtime/Launch.h"
#include "runtime/Stream.h"

namespace {

using namespace std::chrono_literals;
using nrtsim::Error;
using nrtsim::ErrorCode;
using nrtsim::Event;
using nrtsim::Stream;

TEST(Stream, Identity) {
  Stream s(nrtsim::testing::test_core(3), 7, -1);
  EXPECT_EQ(s.device_index(), 3);
  EXPECT_EQ(s.id(), 7u);
  EXPECT_EQ(s.priority(), -1);
  EXPECT_EQ(s.submitted(), 0u);
  EXPECT_EQ(s.completed(), 0u);
  EXPECT_TRUE(s.query());
}

TEST(Stream, RunsWorkInSubmissionOrder) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  std::vector<int> order;
  for (int i = 0; i < 10; ++i) s.submit([&, i] { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(Stream, EverySubmissionTakesATicket) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  for (uint64_t i = 1; i <= 5; ++i) {
    uint64_t seen_inside = 0;
    s.submit([&] { seen_inside = s.submitted(); });
    EXPECT_EQ(seen_inside, i);
    EXPECT_EQ(s.submitted(), i);
    EXPECT_EQ(s.completed(), i);
    EXPECT_TRUE(s.reached(i));
    EXPECT_FALSE(s.reached(i + 1));
    EXPECT_TRUE(s.query());
  }
}

TEST(Stream, WorkIsNotCompleteWhileItRuns) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  bool complete_inside = true;
  uint64_t completed_inside = 99;
  s.submit([&] {
    complete_inside = s.query();
    completed_inside = s.completed();
  });
  EXPECT_FALSE(complete_inside);
  EXPECT_EQ(completed_inside, 0u);
  EXPECT_TRUE(s.query());
}

TEST(Stream, AnExceptionPropagatesAndTheStreamStaysUsable) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  try {
    s.submit([] { throw std::runtime_error("kernel failed"); });
    FAIL() << "the exception did not propagate";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "kernel failed");
  }
  EXPECT_EQ(s.submitted(), 1u);
  EXPECT_EQ(s.completed(), 1u);
  EXPECT_TRUE(s.query());

  int ran = 0;
  s.submit([&] { ++ran; });
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(s.completed(), 2u);

  // The stream's lock was released: another thread can submit (this would hang otherwise).
  std::thread other([&] { s.submit([&] { ++ran; }); });
  other.join();
  EXPECT_EQ(ran, 2);
  EXPECT_TRUE(s.query());
}

TEST(Stream, WorkMayEnqueueOntoItsOwnStream) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  std::vector<int> order;
  s.submit([&] {
    order.push_back(1);
    s.submit([&] { order.push_back(2); });
    order.push_back(3);
    // The enclosing work is still running, so the stream is not idle.
    EXPECT_FALSE(s.query());
  });
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(s.submitted(), 2u);
  EXPECT_EQ(s.completed(), 2u);
  EXPECT_TRUE(s.query());
  EXPECT_TRUE(s.reached(2));
}

TEST(Stream, ConcurrentSubmissionsNeverOverlap) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 200;
  std::atomic<int> in_work{0};
  std::atomic<int> max_in_work{0};
  std::atomic<int> overlaps{0};
  long long total = 0;  // deliberately not atomic: the stream must serialise the increments
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kPerThread; ++i) {
        s.submit([&] {
          const int now = in_work.fetch_add(1) + 1;
          if (now != 1) overlaps.fetch_add(1);
          int seen = max_in_work.load();
          while (now > seen && !max_in_work.compare_exchange_weak(seen, now)) {
          }
          const long long before = total;
          std::this_thread::yield();  // give an overlapping submission every chance to show
          total = before + 1;
          in_work.fetch_sub(1);
        });
      }
    });
  }
  go.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(max_in_work.load(), 1);
  EXPECT_EQ(total, kThreads * kPerThread);
  EXPECT_EQ(s.submitted(), uint64_t{kThreads * kPerThread});
  EXPECT_EQ(s.completed(), uint64_t{kThreads * kPerThread});
  EXPECT_TRUE(s.query());
}

TEST(Stream, SynchronizeWaitsForWorkRunningOnAnotherThread) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  std::atomic<bool> started{false};
  std::atomic<bool> finished{false};
  std::thread worker([&] {
    s.submit([&] {
      started.store(true);
      std::this_thread::sleep_for(50ms);
      finished.store(true);
    });
  });
  while (!started.load()) std::this_thread::yield();
  EXPECT_FALSE(s.query());
  EXPECT_FALSE(s.reached(1));
  s.synchronize();
  EXPECT_TRUE(finished.load());
  EXPECT_TRUE(s.query());
  worker.join();
}

TEST(Event, NeverRecordedCountsComplete) {
  Event e(false);
  EXPECT_FALSE(e.recorded());
  EXPECT_TRUE(e.query());
  EXPECT_EQ(e.device_index(), -1);
  e.synchronize();  // returns at once
  EXPECT_TRUE(e.query());
}

TEST(Event, RecordQuerySynchronize) {
  Stream s(nrtsim::testing::test_core(2), 5, 0);
  Event e(false);
  s.submit([] {});
  e.record(s);
  EXPECT_TRUE(e.recorded());
  EXPECT_EQ(e.device_index(), 2);
  EXPECT_EQ(s.submitted(), 2u);  // the marker itself goes through the queue
  EXPECT_TRUE(e.query());
  e.synchronize();
  EXPECT_TRUE(e.query());
}

TEST(Event, CompletesIndependentlyOfLaterWork) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  Event before(false);
  before.record(s);
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  std::thread worker([&] {
    s.submit([&] {
      started.store(true);
      while (!release.load()) std::this_thread::yield();
    });
  });
  while (!started.load()) std::this_thread::yield();
  // Work submitted after the marker is still running; the marker itself has been passed.
  EXPECT_FALSE(s.query());
  EXPECT_TRUE(before.query());
  before.synchronize();  // must not wait for the later work (it would hang here if it did)
  release.store(true);
  worker.join();
  EXPECT_TRUE(s.query());
}

TEST(Event, ReRecordingMovesTheMarker) {
  Stream a(nrtsim::testing::test_core(0), 1, 0);
  Stream b(nrtsim::testing::test_core(1), 2, 0);
  Event e(false);
  e.record(a);
  EXPECT_EQ(e.device_index(), 0);
  e.record(b);
  EXPECT_EQ(e.device_index(), 1);
  EXPECT_TRUE(e.query());
}

TEST(Event, ElapsedTimeIsModelledTimeHostTimeStaysAvailable) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  Event start(true), middle(true), end(true);
  EXPECT_TRUE(start.timing_enabled());
  nrtsim::Work work;
  work[nrtsim::Engine::kVector].ops = 1 << 20;
  start.record(s);
  std::this_thread::sleep_for(20ms);  // host time: not device time
  middle.record(s);
  nrtsim::launch(s, "test::k", nrtsim::LaunchKind::kKernel, work, [] {});
  end.record(s);
  const auto& model = s.core().clock().model();
  const double kernel_ms = (model.fixed_cost_ns(nrtsim::LaunchKind::kKernel) +
                            (1 << 20) / model.elements_per_ns(nrtsim::Engine::kVector,
                                                              nrtsim::Precision::kFp32)) / 1e6;
  EXPECT_DOUBLE_EQ(start.elapsed_ms(middle), 0.0);  // nothing ran on the device in between
  EXPECT_NEAR(middle.elapsed_ms(end), kernel_ms, 1e-9);
  EXPECT_NEAR(start.elapsed_ms(end), kernel_ms, 1e-9);
  EXPECT_LT(end.elapsed_ms(start), 0.0);
  EXPECT_DOUBLE_EQ(start.elapsed_ms(start), 0.0);
  EXPECT_GE(start.host_elapsed_ms(middle), 19.0);  // sleep_for sleeps at least as long as asked
}

TEST(Event, ElapsedTimeNeedsTimingOnBothEvents) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  Event timed(true), untimed(false);
  timed.record(s);
  untimed.record(s);
  try {
    timed.elapsed_ms(untimed);
    ADD_FAILURE() << "elapsed_ms to an untimed event succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("enable_timing=True"), std::string::npos) << e.what();
  }
  EXPECT_THROW(untimed.elapsed_ms(timed), Error);
  EXPECT_THROW(untimed.elapsed_ms(untimed), Error);
  EXPECT_DOUBLE_EQ(timed.elapsed_ms(timed), 0.0);
}

TEST(Event, ElapsedTimeNeedsBothEventsRecorded) {
  Stream s(nrtsim::testing::test_core(0), 0, 0);
  Event recorded(true), pending(true);
  recorded.record(s);
  try {
    recorded.elapsed_ms(pending);
    FAIL() << "elapsed_ms to an unrecorded event succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("recorded"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pending.elapsed_ms(recorded), Error);
  pending.record(s);
  EXPECT_GE(recorded.elapsed_ms(pending), 0.0);
}

}  // namespace
