// The Runtime in an environment it cannot honour, set in main() before first use: a clear
// configuration error, no devices, nothing initialised, and a retry once the environment is fixed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "test_util.h"
#include "runtime/Error.h"
#include "runtime/Runtime.h"

namespace {

using nrtsim::Error;
using nrtsim::ErrorCode;
using nrtsim::Runtime;

TEST(RuntimeBadEnvironment, ReportsTheErrorAndRetriesOnceFixed) {
  // Everything in one test, in order: the Runtime is a process-wide singleton.
  ASSERT_FALSE(Runtime::is_initialized());
  EXPECT_EQ(Runtime::visible_device_count(), 0);  // neither throws nor initialises
  const std::string error = Runtime::configuration_error();
  EXPECT_NE(error.find("NEURON_LOGICAL_NC_CONFIG=3"), std::string::npos) << error;
  EXPECT_FALSE(Runtime::is_initialized());

  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      Runtime::get();
      FAIL() << "Runtime::get() succeeded in a bad environment";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kConfiguration);
      EXPECT_EQ(std::string(e.what()), error);
    }
    EXPECT_FALSE(Runtime::is_initialized());
  }

  setenv("NEURON_LOGICAL_NC_CONFIG", "banana", 1);
  EXPECT_EQ(Runtime::visible_device_count(), 0);
  EXPECT_NE(Runtime::configuration_error().find("NEURON_LOGICAL_NC_CONFIG='banana'"),
            std::string::npos)
      << Runtime::configuration_error();
  EXPECT_THROW(Runtime::get(), Error);

  setenv("NEURON_LOGICAL_NC_CONFIG", "1", 1);
  EXPECT_EQ(Runtime::configuration_error(), "");
  EXPECT_EQ(Runtime::visible_device_count(), 8);
  Runtime& runtime = Runtime::get();
  EXPECT_TRUE(Runtime::is_initialized());
  EXPECT_EQ(runtime.device_count(), 8);
  EXPECT_EQ(runtime.core(7).hbm().capacity(), 12ull * 1024 * 1024 * 1024);
}

}  // namespace

int main(int argc, char** argv) {
  for (const char* name : {"NRTSIM_INSTANCE", "NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES",
                           "NRTSIM_HBM_BYTES"}) {
    unsetenv(name);
  }
  setenv("NEURON_LOGICAL_NC_CONFIG", "3", 1);
  nrtsim::testing::use_shipped_engine_model();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
