// Helpers shared by the nrtsim unit tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "runtime/Error.h"

namespace nrtsim::testing {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

// Runs `f`, expects it to throw an nrtsim::Error with code `expected`; returns the message.
template <class F>
std::string error_message(ErrorCode expected, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an nrtsim::Error";
  return "";
}

}  // namespace nrtsim::testing
