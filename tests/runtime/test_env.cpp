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

TEST(ParseCoreList, NamesAReversedRange) {
  for (const char* text : {"9-3", "0,5-2"}) {
    const std::string message =
        configuration_error([&] { env::parse_core_list("NEURON_RT_VISIBLE_CORES", text); });
    EXPECT_NE(message.find("NEURON_RT_VISIBLE_CORES='" + std::string(text) + "'"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("reversed"), std::string::npos) << message;
  }
  const std::string message =
      configuration_error([&] { env::parse_core_list("NEURON_RT_VISIBLE_CORES", "9-3"); });
  EXPECT_NE(message.find("'3-9'"), std::string::npos) << message;  // the range it should be
}

TEST(ParseCoreList, RejectsDuplicates) {
  for (const char* text : {"0,0", "0-2,1", "1-3,2-4", "4,0-7"}) {
    const std::string message =
        configuration_error([&] { env::parse_core_list("NEURON_RT_VISIBLE_CORES", text); });
    EXPECT_NE(message.find("NEURON_RT_VISIBLE_CORES"), std::string::npos) << message;
    EXPECT_NE(message.find("listed once"), std::string::npos) << message;
  }
}

TEST(ParseBytes, BareByteCountsFromOneMiB) {
  EXPECT_EQ(env::parse_bytes("V", "1048576"), 1048576u);
  EXPECT_EQ(env::parse_bytes("V", "1073741824"), 1073741824u);
  EXPECT_EQ(env::parse_bytes("V", "4096B"), 4096u);  // bytes said explicitly
  EXPECT_EQ(env::parse_bytes("V", "1b"), 1u);
}

TEST(ParseBytes, RefusesABareNumberBelowOneMiBWithTheReason) {
  for (const char* text : {"512", "1", "1048575", "64.5"}) {
    const std::string message =
        configuration_error([&] { env::parse_bytes("NRTSIM_HBM_BYTES", text); });
    EXPECT_NE(message.find("NRTSIM_HBM_BYTES='" + std::string(text) + "'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("bare number below 1 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find(std::string(text) + "MiB"), std::string::npos) << message;
  }
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

TEST(ParseSwitch, AcceptsTheSwitchWordsInAnyCase) {
  for (const char* on : {"1", "true", "True", "YES", "on", " On "}) {
    EXPECT_TRUE(env::parse_switch("V", on)) << on;
  }
  for (const char* off : {"0", "false", "FALSE", "no", "off", "Off"}) {
    EXPECT_FALSE(env::parse_switch("V", off)) << off;
  }
}

TEST(ParseSwitch, RejectsAnythingElseListingTheWords) {
  for (const char* text : {"maybe", "2", "-1", "enable", "y", "auto"}) {
    const std::string message =
        configuration_error([&] { env::parse_switch("TORCH_NEURONX_FALLBACK_WARN", text); });
    EXPECT_NE(message.find("TORCH_NEURONX_FALLBACK_WARN='" + std::string(text) + "'"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("1, true, yes, on"), std::string::npos) << message;
    EXPECT_NE(message.find("0, false, no, off"), std::string::npos) << message;
  }
}

TEST(ParseAutoSwitch, AutoOrASwitch) {
  EXPECT_EQ(env::parse_auto_switch("V", "auto"), std::nullopt);
  EXPECT_EQ(env::parse_auto_switch("V", "AUTO"), std::nullopt);
  EXPECT_EQ(env::parse_auto_switch("V", "1"), std::optional<bool>(true));
  EXPECT_EQ(env::parse_auto_switch("V", "off"), std::optional<bool>(false));
  const std::string message = configuration_error(
      [&] { env::parse_auto_switch("NRTSIM_COLLECTIVE_SINGLE_COPY", "2"); });
  EXPECT_NE(message.find("NRTSIM_COLLECTIVE_SINGLE_COPY='2'"), std::string::npos) << message;
  EXPECT_NE(message.find("auto"), std::string::npos) << message;
}

TEST(EnvValues, UnsetIsNulloptAndSetIsParsed) {
  unsetenv("NRTSIM_TEST_ENV_VALUE");
  EXPECT_EQ(env::switch_value("NRTSIM_TEST_ENV_VALUE"), std::nullopt);
  EXPECT_EQ(env::bytes_value("NRTSIM_TEST_ENV_VALUE"), std::nullopt);
  EXPECT_EQ(env::int_value("NRTSIM_TEST_ENV_VALUE"), std::nullopt);
  setenv("NRTSIM_TEST_ENV_VALUE", "off", 1);
  EXPECT_EQ(env::switch_value("NRTSIM_TEST_ENV_VALUE"), std::optional<bool>(false));
  setenv("NRTSIM_TEST_ENV_VALUE", "2GiB", 1);
  EXPECT_EQ(env::bytes_value("NRTSIM_TEST_ENV_VALUE"), std::optional<uint64_t>(2ull << 30));
  setenv("NRTSIM_TEST_ENV_VALUE", "12", 1);
  EXPECT_EQ(env::int_value("NRTSIM_TEST_ENV_VALUE"), std::optional<int>(12));
  unsetenv("NRTSIM_TEST_ENV_VALUE");
}

}  // namespace
