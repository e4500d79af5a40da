// The Runtime initialised from a non-default environment, set in main() before first use:
// trn2.48xlarge at LNC=1, cores 8-11 visible (on chip 1), 64 MiB of HBM per core.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"
#include "runtime/Error.h"
#include "runtime/Runtime.h"

namespace {

using nrtsim::Error;
using nrtsim::ErrorCode;
using nrtsim::Runtime;

constexpr uint64_t kMiB = 1024ull * 1024;

TEST(RuntimeFromEnvironment, HonoursEveryVariable) {
  EXPECT_EQ(Runtime::visible_device_count(), 4);
  EXPECT_EQ(Runtime::configuration_error(), "");
  Runtime& runtime = Runtime::get();
  EXPECT_EQ(runtime.topology().instance().name, "trn2.48xlarge");
  EXPECT_EQ(runtime.topology().lnc(), 1);
  EXPECT_EQ(runtime.topology().logical_cores_on_instance(), 128);
  ASSERT_EQ(runtime.device_count(), 4);
  for (int i = 0; i < 4; ++i) {
    const auto& info = runtime.core(i).info();
    EXPECT_EQ(info.device_index, i);
    EXPECT_EQ(info.logical_id, 8 + i);
    EXPECT_EQ(info.chip, 1);
    EXPECT_EQ(info.physical_cores, (std::vector<int>{8 + i}));
    EXPECT_EQ(runtime.core(i).hbm().capacity(), 64 * kMiB);
  }
  EXPECT_THROW(runtime.core(4), Error);
}

TEST(RuntimeFromEnvironment, TheEnvironmentIsReadOnce) {
  Runtime& runtime = Runtime::get();
  setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
  EXPECT_EQ(&Runtime::get(), &runtime);
  EXPECT_EQ(Runtime::get().device_count(), 4);
  EXPECT_EQ(Runtime::visible_device_count(), 4);  // the initialised runtime answers
  setenv("NEURON_RT_VISIBLE_CORES", "8-11", 1);
}

TEST(RuntimeFromEnvironment, HbmCapacityComesFromTheEnvironment) {
  nrtsim::HbmAllocator& hbm = Runtime::get().core(2).hbm();
  void* most = hbm.allocate(60 * kMiB);
  EXPECT_EQ(Runtime::get().device_of(most), 2);
  try {
    hbm.allocate(8 * kMiB);
    FAIL() << "expected OutOfMemoryError";
  } catch (const nrtsim::OutOfMemoryError& e) {
    EXPECT_EQ(e.device(), 2);
    EXPECT_EQ(e.requested(), 8 * kMiB);
    EXPECT_EQ(e.free_bytes(), 4 * kMiB);
    EXPECT_EQ(e.capacity(), 64 * kMiB);
  }
  hbm.free(most);
  EXPECT_EQ(hbm.free_bytes(), 64 * kMiB);
}

TEST(RuntimeFromEnvironment, AForkedChildCannotUseTheRuntime) {
  Runtime::get();
  ASSERT_TRUE(Runtime::is_initialized());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Exit codes: 0 = refused with kBadFork as it should be, others = what went wrong.
    if (!Runtime::in_forked_child()) _exit(2);
    try {
      Runtime::get();
      _exit(3);
    } catch (const Error& e) {
      const std::string message = e.what();
      _exit(e.code() == ErrorCode::kBadFork && message.find("spawn") != std::string::npos ? 0
                                                                                            : 4);
    } catch (...) {
      _exit(5);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent is unaffected.
  EXPECT_FALSE(Runtime::in_forked_child());
  EXPECT_EQ(Runtime::get().device_count(), 4);
}

}  // namespace

int main(int argc, char** argv) {
  unsetenv("NEURON_RT_NUM_CORES");
  setenv("NRTSIM_INSTANCE", "trn2.48xlarge", 1);
  setenv("NEURON_LOGICAL_NC_CONFIG", "1", 1);
  setenv("NEURON_RT_VISIBLE_CORES", "8-11", 1);
  setenv("NRTSIM_HBM_BYTES", "64MiB", 1);
  nrtsim::testing::use_shipped_engine_model();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
