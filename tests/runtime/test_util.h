// Helpers shared by the nrtsim unit tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/EngineModel.h"
#include "runtime/Error.h"
#include "runtime/Runtime.h"
#include "runtime/Topology.h"

namespace nrtsim::testing {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

// The engine and link model files shipped with the package (CMake passes their paths) become the
// ones the process default runtime reads; the mains of tests that use Runtime::get() call this
// first.
inline void use_shipped_engine_model() {
  set_default_engine_model_path(NRTSIM_SHIPPED_ENGINE_MODEL);
  set_default_link_model_path(NRTSIM_SHIPPED_LINK_MODEL);
}

// A new runtime, not the process default: trn2.3xlarge at LNC=2 (four logical cores), 1 GiB of
// HBM per core, the shipped engine model, every clock at zero.
inline std::unique_ptr<Runtime> fresh_runtime() {
  TopologyConfig config;
  config.hbm_bytes = kGiB;
  return std::make_unique<Runtime>(Topology::build(config),
                                   load_engine_model(NRTSIM_SHIPPED_ENGINE_MODEL));
}

// One such runtime shared by the tests that need cores and streams but no particular clock.
inline Runtime& test_runtime() {
  static Runtime* runtime = fresh_runtime().release();
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
