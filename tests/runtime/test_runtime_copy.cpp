// The process-wide Runtime in the default environment (trn2.3xlarge, LNC=2: four logical cores),
// its NeuronCores and streams, and copies between host and HBM.
//
// main() clears the environment variables nrtsim reads before anything touches the Runtime, so
// these tests see the default configuration whatever the calling shell has set.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "runtime/Copy.h"
#include "runtime/Error.h"
#include "runtime/LaunchTotals.h"
#include "runtime/Runtime.h"

namespace {

using namespace std::chrono_literals;
using nrtsim::CopyKind;
using nrtsim::Error;
using nrtsim::ErrorCode;
using nrtsim::NeuronCore;
using nrtsim::Runtime;

using nrtsim::testing::error_message;
using nrtsim::testing::kGiB;

// An HBM allocation freed at scope exit.
struct DeviceBuffer {
  DeviceBuffer(int device, size_t bytes)
      : core(Runtime::get().core(device)), ptr(static_cast<char*>(core.hbm().allocate(bytes))) {}
  ~DeviceBuffer() { core.hbm().free(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  NeuronCore& core;
  char* ptr;
};

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 31 + seed) & 0xFF);
  return v;
}

// Every launch of this test process, aggregated per op.
nrtsim::LaunchTotals& totals() {
  static nrtsim::LaunchTotals* observer = [] {
    auto* o = new nrtsim::LaunchTotals();
    nrtsim::add_observer(o);
    return o;
  }();
  return *observer;
}

const nrtsim::OpTotals* trace_row(const std::string& op) {
  static std::vector<nrtsim::OpTotals> rows;
  rows = totals().snapshot();
  for (const auto& row : rows) {
    if (row.op == op) return &row;
  }
  return nullptr;
}

TEST(Runtime, InitialisesFromTheDefaultEnvironment) {
  EXPECT_EQ(Runtime::visible_device_count(), 4);  // answerable before initialisation
  EXPECT_EQ(Runtime::configuration_error(), "");
  Runtime& runtime = Runtime::get();
  EXPECT_TRUE(Runtime::is_initialized());
  EXPECT_FALSE(Runtime::in_forked_child());
  EXPECT_EQ(&Runtime::get(), &runtime);
  EXPECT_EQ(runtime.topology().instance().name, "trn2.3xlarge");
  EXPECT_EQ(runtime.topology().lnc(), 2);
  ASSERT_EQ(runtime.device_count(), 4);
  EXPECT_EQ(Runtime::visible_device_count(), 4);
  for (int i = 0; i < 4; ++i) {
    NeuronCore& core = runtime.core(i);
    EXPECT_EQ(core.device_index(), i);
    EXPECT_EQ(core.info().logical_id, i);
    EXPECT_EQ(core.hbm().capacity(), 24 * kGiB);
    EXPECT_EQ(&runtime.core(i), &core);
  }
}

TEST(Runtime, GetIsThreadSafe) {
  std::vector<Runtime*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] { seen[i] = &Runtime::get(); });
  }
  for (auto& t : threads) t.join();
  for (Runtime* r : seen) EXPECT_EQ(r, &Runtime::get());
}

TEST(Runtime, CoreOutOfRangeIsAnInvalidDevice) {
  Runtime& runtime = Runtime::get();
  std::string message = error_message(ErrorCode::kInvalidDevice, [&] { runtime.core(4); });
  EXPECT_NE(message.find("neuron:4 does not exist"), std::string::npos) << message;
  EXPECT_NE(message.find("neuron:0-neuron:3"), std::string::npos) << message;
  message = error_message(ErrorCode::kInvalidDevice, [&] { runtime.core(-1); });
  EXPECT_NE(message.find("neuron:-1"), std::string::npos) << message;
}

TEST(Runtime, DeviceOfFindsTheOwningCore) {
  Runtime& runtime = Runtime::get();
  DeviceBuffer b0(0, 4096), b2(2, 100), b3(3, 1);
  EXPECT_EQ(runtime.device_of(b0.ptr), 0);
  EXPECT_EQ(runtime.device_of(b0.ptr + 4095), 0);
  EXPECT_EQ(runtime.device_of(b2.ptr), 2);
  EXPECT_EQ(runtime.device_of(b2.ptr + 99), 2);
  EXPECT_EQ(runtime.device_of(b3.ptr), 3);
  std::vector<char> host(16);
  EXPECT_EQ(runtime.device_of(host.data()), -1);
  EXPECT_EQ(runtime.device_of(nullptr), -1);

  char* gone = nullptr;
  {
    DeviceBuffer temp(1, 512);
    gone = temp.ptr;
    EXPECT_EQ(runtime.device_of(gone), 1);
  }
  EXPECT_EQ(runtime.device_of(gone), -1);
}

TEST(Copy, HostToDeviceToHostRoundTrip) {
  totals().clear();
  constexpr size_t kBytes = 10000;
  const auto input = pattern(kBytes, 7);
  DeviceBuffer dev(0, kBytes);
  nrtsim::Stream& stream = dev.core.default_stream();
  const uint64_t submitted = stream.submitted();

  nrtsim::copy(stream, dev.ptr, input.data(), kBytes, CopyKind::kHostToDevice);
  EXPECT_EQ(std::memcmp(dev.ptr, input.data(), kBytes), 0);
  std::vector<unsigned char> output(kBytes, 0);
  nrtsim::copy(stream, output.data(), dev.ptr, kBytes, CopyKind::kDeviceToHost);
  EXPECT_EQ(output, input);
  EXPECT_EQ(stream.submitted(), submitted + 2);  // copies are ordered on the stream
  EXPECT_TRUE(stream.query());

  const auto* h2d = trace_row("nrtsim::copy_host_to_device");
  ASSERT_NE(h2d, nullptr);
  EXPECT_EQ(h2d->launches, 1u);
  EXPECT_EQ(h2d->bytes_read, kBytes);
  EXPECT_EQ(h2d->bytes_written, kBytes);
  EXPECT_EQ(h2d->kind, nrtsim::LaunchKind::kCopyHostToDevice);
  EXPECT_EQ(h2d->engine, nrtsim::Engine::kDma);
  const auto* d2h = trace_row("nrtsim::copy_device_to_host");
  ASSERT_NE(d2h, nullptr);
  EXPECT_EQ(d2h->bytes_read, kBytes);
  EXPECT_EQ(d2h->kind, nrtsim::LaunchKind::kCopyDeviceToHost);
}

TEST(Copy, DeviceToDeviceAcrossCores) {
  totals().clear();
  constexpr size_t kBytes = 3000;
  const auto input = pattern(kBytes, 99);
  DeviceBuffer a(0, kBytes), b(1, kBytes), c(1, kBytes);
  nrtsim::Stream& stream = a.core.pool_stream(0);
  nrtsim::copy(stream, a.ptr, input.data(), kBytes, CopyKind::kHostToDevice);
  nrtsim::copy(stream, b.ptr, a.ptr, kBytes, CopyKind::kDeviceToDevice);
  nrtsim::copy(stream, c.ptr, b.ptr, kBytes, CopyKind::kDeviceToDevice);
  std::vector<unsigned char> output(kBytes, 0);
  nrtsim::copy(stream, output.data(), c.ptr, kBytes, CopyKind::kDeviceToHost);
  EXPECT_EQ(output, input);
  const auto* d2d = trace_row("nrtsim::copy_device_to_device");
  ASSERT_NE(d2d, nullptr);
  EXPECT_EQ(d2d->launches, 2u);
  EXPECT_EQ(d2d->bytes_read, 2 * kBytes);
  EXPECT_EQ(d2d->kind, nrtsim::LaunchKind::kCopyDeviceToDevice);
}

TEST(Copy, InteriorRangesAndOverlap) {
  constexpr size_t kBytes = 2048;
  DeviceBuffer dev(2, kBytes);
  nrtsim::Stream& stream = dev.core.default_stream();
  std::vector<unsigned char> host(kBytes);
  std::iota(host.begin(), host.end(), 0);
  nrtsim::copy(stream, dev.ptr, host.data(), kBytes, CopyKind::kHostToDevice);
  // Shift bytes [0, 1000) to [10, 1010) inside the one allocation: overlapping, like memmove.
  nrtsim::copy(stream, dev.ptr + 10, dev.ptr, 1000, CopyKind::kDeviceToDevice);
  std::vector<unsigned char> expected = host;
  std::memmove(expected.data() + 10, expected.data(), 1000);
  std::vector<unsigned char> out(100);
  nrtsim::copy(stream, out.data(), dev.ptr + 1948, 100, CopyKind::kDeviceToHost);
  EXPECT_TRUE(std::equal(out.begin(), out.end(), expected.begin() + 1948));
  nrtsim::copy(stream, out.data(), dev.ptr + 5, 100, CopyKind::kDeviceToHost);
  EXPECT_TRUE(std::equal(out.begin(), out.end(), expected.begin() + 5));
}

TEST(Copy, HostPointerClaimedAsDevicePointerIsRejected) {
  constexpr size_t kBytes = 1024;
  DeviceBuffer dev(0, kBytes);
  nrtsim::Stream& stream = dev.core.default_stream();
  std::vector<unsigned char> host(kBytes, 0x11), other(kBytes, 0x22);
  const uint64_t submitted = stream.submitted();

  std::string message = error_message(ErrorCode::kInvalidArgument, [&] {
    nrtsim::copy(stream, other.data(), host.data(), kBytes, CopyKind::kHostToDevice);
  });
  EXPECT_NE(message.find("destination"), std::string::npos) << message;
  message = error_message(ErrorCode::kInvalidArgument, [&] {
    nrtsim::copy(stream, other.data(), host.data(), kBytes, CopyKind::kDeviceToHost);
  });
  EXPECT_NE(message.find("source"), std::string::npos) << message;
  error_message(ErrorCode::kInvalidArgument, [&] {
    nrtsim::copy(stream, dev.ptr, host.data(), kBytes, CopyKind::kDeviceToDevice);
  });
  error_message(ErrorCode::kInvalidArgument, [&] {
    nrtsim::copy(stream, host.data(), dev.ptr, kBytes, CopyKind::kDeviceToDevice);
  });
  // Nothing was copied and nothing was enqueued.
  EXPECT_TRUE(std::all_of(other.begin(), other.end(), [](unsigned char c) { return c == 0x22; }));
  EXPECT_EQ(stream.submitted(), submitted);
}

TEST(Copy, RangesMustStayInsideOneAllocation) {
  DeviceBuffer dev(0, 1024);
  nrtsim::Stream& stream = dev.core.default_stream();
  std::vector<unsigned char> host(8192, 0);
  // Past the end of the allocation.
  error_message(ErrorCode::kInvalidArgument, [&] {
    nrtsim::copy(stream, host.data(), dev.ptr, 1025, CopyKind::kDeviceToHost);
  });
  error_message(ErrorCode::kInvalidArgument, [&] {
    nrtsim::copy(stream, dev.ptr + 1000, host.data(), 100, CopyKind::kHostToDevice);
  });
  // From one allocation into another on the same core, over whatever lies between them.
  std::vector<std::unique_ptr<DeviceBuffer>> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(std::make_unique<DeviceBuffer>(0, 512));
  std::sort(blocks.begin(), blocks.end(),
            [](const auto& x, const auto& y) { return x->ptr < y->ptr; });
  for (size_t i = 0; i + 1 < blocks.size(); ++i) {
    char* first = blocks[i]->ptr;
    char* second = blocks[i + 1]->ptr;
    const size_t span = static_cast<size_t>(second - first) + 1;
    if (span > host.size()) continue;
    error_message(ErrorCode::kInvalidArgument, [&] {
      nrtsim::copy(stream, host.data(), first, span, CopyKind::kDeviceToHost);
    });
  }
  // Device to device, where the destination on another core is too small.
  DeviceBuffer elsewhere(1, 512);
  std::memset(elsewhere.ptr, 0x5A, 512);
  const std::string message = error_message(ErrorCode::kInvalidArgument, [&] {
    nrtsim::copy(stream, elsewhere.ptr, dev.ptr, 1024, CopyKind::kDeviceToDevice);
  });
  EXPECT_NE(message.find("destination range of 1024 bytes"), std::string::npos) << message;
  EXPECT_EQ(static_cast<unsigned char>(elsewhere.ptr[0]), 0x5A);
}

TEST(Copy, NullAndEmptyCopies) {
  DeviceBuffer dev(0, 512);
  nrtsim::Stream& stream = dev.core.default_stream();
  const uint64_t submitted = stream.submitted();
  nrtsim::copy(stream, nullptr, nullptr, 0, CopyKind::kDeviceToDevice);  // nothing to do
  EXPECT_EQ(stream.submitted(), submitted);
  std::vector<char> host(16);
  std::string message = error_message(ErrorCode::kInvalidArgument, [&] {
    nrtsim::copy(stream, dev.ptr, nullptr, 16, CopyKind::kHostToDevice);
  });
  EXPECT_NE(message.find("null"), std::string::npos) << message;
  error_message(ErrorCode::kInvalidArgument, [&] {
    nrtsim::copy(stream, nullptr, dev.ptr, 16, CopyKind::kDeviceToHost);
  });
}

TEST(NeuronCore, StreamsAndTheirIds) {
  NeuronCore& core = Runtime::get().core(1);
  EXPECT_EQ(NeuronCore::kPoolSize, 32u);
  EXPECT_EQ(core.stream_count(), 1 + 2 * NeuronCore::kPoolSize);
  EXPECT_EQ(core.default_stream().id(), NeuronCore::kDefaultStreamId);
  EXPECT_EQ(core.default_stream().priority(), 0);
  EXPECT_EQ(&core.stream(0), &core.default_stream());
  for (uint32_t id = 0; id < core.stream_count(); ++id) {
    EXPECT_EQ(core.stream(id).id(), id);
    EXPECT_EQ(core.stream(id).device_index(), 1);
    EXPECT_EQ(core.stream(id).priority(), id > NeuronCore::kPoolSize ? -1 : 0) << id;
  }
}

TEST(NeuronCore, StreamIdOutOfRangeThrows) {
  NeuronCore& core = Runtime::get().core(2);
  for (uint32_t id : {core.stream_count(), core.stream_count() + 1, 1000u, 0xFFFFFFFFu}) {
    const std::string message =
        error_message(ErrorCode::kInvalidArgument, [&] { core.stream(id); });
    EXPECT_NE(message.find("neuron:2 has no stream with id " + std::to_string(id)),
              std::string::npos)
        << message;
  }
}

TEST(NeuronCore, NormalPoolIsRoundRobin) {
  NeuronCore& core = Runtime::get().core(0);
  nrtsim::Stream& first = core.pool_stream(0);
  EXPECT_GE(first.id(), 1u);
  EXPECT_LE(first.id(), NeuronCore::kPoolSize);
  EXPECT_EQ(first.priority(), 0);
  std::vector<uint32_t> ids{first.id()};
  for (uint32_t i = 1; i < NeuronCore::kPoolSize; ++i) {
    nrtsim::Stream& s = core.pool_stream(i % 2 == 0 ? 0 : 3);  // any priority >= 0 is normal
    EXPECT_EQ(s.id(), ids.back() % NeuronCore::kPoolSize + 1);
    EXPECT_EQ(s.priority(), 0);
    EXPECT_NE(&s, &core.default_stream());
    ids.push_back(s.id());
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());  // all 32 distinct
  EXPECT_EQ(&core.pool_stream(0), &first);  // and then around again
}

TEST(NeuronCore, HighPriorityPoolHasPriorityMinusOne) {
  NeuronCore& core = Runtime::get().core(3);
  nrtsim::Stream& first = core.pool_stream(-1);
  EXPECT_EQ(first.priority(), -1);
  EXPECT_GT(first.id(), NeuronCore::kPoolSize);
  EXPECT_LE(first.id(), 2 * NeuronCore::kPoolSize);
  uint32_t previous = first.id();
  for (uint32_t i = 1; i < NeuronCore::kPoolSize; ++i) {
    nrtsim::Stream& s = core.pool_stream(i % 2 == 0 ? -1 : -5);
    EXPECT_EQ(s.priority(), -1);
    EXPECT_EQ(s.device_index(), 3);
    EXPECT_EQ(s.id(), previous == 2 * NeuronCore::kPoolSize ? NeuronCore::kPoolSize + 1
                                                             : previous + 1);
    previous = s.id();
  }
  EXPECT_EQ(&core.pool_stream(-1), &first);
}

TEST(NeuronCore, SynchronizeWaitsForEveryStream) {
  Runtime& runtime = Runtime::get();
  nrtsim::Stream& busy = runtime.core(1).pool_stream(-1);
  std::atomic<bool> started{false}, finished{false};
  std::thread worker([&] {
    busy.submit([&] {
      started.store(true);
      std::this_thread::sleep_for(30ms);
      finished.store(true);
    });
  });
  while (!started.load()) std::this_thread::yield();
  runtime.core(1).synchronize();
  EXPECT_TRUE(finished.load());
  worker.join();

  started = false;
  finished = false;
  std::thread worker2([&] {
    runtime.core(2).stream(5).submit([&] {
      started.store(true);
      std::this_thread::sleep_for(30ms);
      finished.store(true);
    });
  });
  while (!started.load()) std::this_thread::yield();
  runtime.synchronize();
  EXPECT_TRUE(finished.load());
  worker2.join();
}

}  // namespace

int main(int argc, char** argv) {
  for (const char* name : {"NRTSIM_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_RT_VISIBLE_CORES",
                           "NEURON_RT_NUM_CORES", "NRTSIM_HBM_BYTES"}) {
    unsetenv(name);
  }
  nrtsim::testing::use_shipped_engine_model();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
