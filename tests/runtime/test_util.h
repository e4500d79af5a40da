// Helpers shared by the nrtsim unit tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "runtime/EngineModel.h"
#include "runtime/Error.h"
#include "runtime/Runtime.h"
#include "runtime/Topology.h"

namespace nrtsim::testing {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

// The engine model file shipped with the package (CMake passes its path) becomes the one the
// process default runtime reads; the mains of tests that use Runtime::get() call this first.
inline void use_shipped_engine_model() {
  set_default_engine_model_path(NRTSIM_SHIPPED_ENGINE_MODEL);
}

// A runtime of its own for tests that need cores and streams but not the process default:
// trn2.3xlarge at LNC=2 (four logical cores), 1 GiB of HBM per core.
inline Runtime& test_runtime() {
  static Runtime* runtime = [] {
    TopologyConfig config;
    config.hbm_bytes = kGiB;
    return new Runtime(Topology::build(config), load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL));
  }();
  return *runtime;
}
inline NeuronCore& test_core(int device_index) { return test_runtime().core(device_index); }

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
