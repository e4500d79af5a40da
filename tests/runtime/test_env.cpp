// Parsers for the environment variables nrtsim honours.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/Env.h"
#include "runtime/Error.h"

namespace {

using nrtsim::Error;
using nrtsim::ErrorCode;
namespace env = nrtsim::env;

// Runs `f`, which must throw Error(kConfiguration); returns its message.
template <class F>
std::string configuration_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfiguration) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected Error(kConfiguration)";
  return "";
}

TEST(EnvGet, UnsetAndEmptyAreNullopt) {
  unsetenv("NRTSIM_TEST_ENV_GET");
  EXPECT_FALSE(env::get("NRTSIM_TEST_ENV_GET").has_value());
  setenv("NRTSIM_TEST_ENV_GET", "", 1);
  EXPECT_FALSE(env::get("NRTSIM_TEST_ENV_GET").has_value());
  setenv("NRTSIM_TEST_ENV_GET", "abc", 1);
  ASSERT_TRUE(env::get("NRTSIM_TEST_ENV_GET").has_value());
  EXPECT_EQ(*env::get("NRTSIM_TEST_ENV_GET"), "abc");
  unsetenv("NRTSIM_TEST_ENV_GET");
}

TEST(ParseInt, AcceptsNonNegativeIntegers) {
  EXPECT_EQ(env::parse_int("V", "0"), 0);
  EXPECT_EQ(env::parse_int("V", "3"), 3);
  EXPECT_EQ(env::parse_int("V", "128"), 128);
  EXPECT_EQ(env::parse_int("V", " 7 "), 7);
  EXPECT_EQ(env::parse_int("V", "1000000"), 1000000);
}

TEST(ParseInt, RejectsEverythingElseNamingTheVariable) {
  for (const char* text : {"", " ", "-1", "+1", "abc", "3x", "1.5", "0x10", "1000001",
                           "99999999999999999999"}) {
    const std::string message =
        configuration_error([&] { env::parse_int("NEURON_RT_NUM_CORES", text); });
    EXPECT_NE(message.find("NEURON_RT_NUM_CORES"), std::string::npos) << message;
    EXPECT_NE(message.find(std::string("'") + text + "'"), std::string::npos) << message;
  }
}

TEST(ParseCoreList, SingleCoresAndRanges) {
  EXPECT_EQ(env::parse_core_list("V", "0"), (std::vector<int>{0}));
  EXPECT_EQ(env::parse_core_list("V", "2"), (std::vector<int>{2}));
  EXPECT_EQ(env::parse_core_list("V", "0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(env::parse_core_list("V", "0-1,4,6-7"), (std::vector<int>{0, 1, 4, 6, 7}));
  EXPECT_EQ(env::parse_core_list("V", "5-5"), (std::vector<int>{5}));
  EXPECT_EQ(env::parse_core_list("V", " 1 , 3 - 4 "), (std::vector<int>{1, 3, 4}));
}

TEST(ParseCoreList, ResultIsSorted) {
  EXPECT_EQ(env::parse_core_list("V", "6-7,0,3-4"), (std::vector<int>{0, 3, 4, 6, 7}));
}

TEST(ParseCoreList, RejectsBadInput) {
  for (const char* text : {"", ",", "0,", ",0", "0,,1", "a", "1-", "-1", "3-1", "0-1-2", "1.5",
                           "0;1", "0-100001", "999999"}) {
    const std::string message =
        configuration_error([&] { env::parse_core_list("NEURON_RT_VISIBLE_CORES", text); });
    EXPECT_NE(message.find("NEURON_RT_VISIBLE_CORES='" + std::string(text) + "'"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("comma-separated"), std::string::npos) << message;
  }
}

TEST(ParseCoreList, RejectsDuplicates) {
  for (const char* text : {"0,0", "0-2,1", "1-3,2-4", "4,0-7"}) {
    const std::string message =
        configuration_error([&] { env::parse_core_list("NEURON_RT_VISIBLE_CORES", text); });
    EXPECT_NE(message.find("NEURON_RT_VISIBLE_CORES"), std::string::npos) << message;
    EXPECT_NE(message.find("listed once"), std::string::npos) << message;
  }
}

TEST(ParseBytes, PlainByteCounts) {
  EXPECT_EQ(env::parse_bytes("V", "1"), 1u);
  EXPECT_EQ(env::parse_bytes("V", "1073741824"), 1073741824u);
  EXPECT_EQ(env::parse_bytes("V", "4096B"), 4096u);
}

TEST(ParseBytes, BinaryUnits) {
  constexpr uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;
  EXPECT_EQ(env::parse_bytes("V", "512MiB"), 512 * MiB);
  EXPECT_EQ(env::parse_bytes("V", "1.5GiB"), GiB + GiB / 2);
  EXPECT_EQ(env::parse_bytes("V", "64M"), 64 * MiB);
  EXPECT_EQ(env::parse_bytes("V", "2G"), 2 * GiB);
  EXPECT_EQ(env::parse_bytes("V", "3k"), 3 * KiB);
  EXPECT_EQ(env::parse_bytes("V", "8KB"), 8 * KiB);
  EXPECT_EQ(env::parse_bytes("V", "24gb"), 24 * GiB);
  EXPECT_EQ(env::parse_bytes("V", "1TiB"), TiB);
  EXPECT_EQ(env::parse_bytes("V", " 2 GiB "), 2 * GiB);
  EXPECT_EQ(env::parse_bytes("V", "0.5KiB"), 512u);
}

TEST(ParseBytes, RejectsBadInput) {
  for (const char* text : {"", "GiB", "0", "0GiB", "0.1", "-1", "1.2.3", ".", "1e3", "12XB",
                           "1 Gibibyte", "abc", "100000000TiB"}) {
    const std::string message =
        configuration_error([&] { env::parse_bytes("NRTSIM_HBM_BYTES", text); });
    EXPECT_NE(message.find("NRTSIM_HBM_BYTES='" + std::string(text) + "'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("byte count"), std::string::npos) << message;
  }
}

}  // namespace
