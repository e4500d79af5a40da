// The simulated instance, as one process sees it: a Topology (which logical cores are visible)
// and the engine model of its chip, each core with its HBM, streams and simulated clock.
//
// Any number of runtimes can be built from a Topology (tests do). The process default, which the
// PyTorch backend uses, is created lazily on first use from the environment, the way the Neuron
// runtime initialises on first device access.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/EngineModel.h"
#include "runtime/NeuronCore.h"
#include "runtime/Topology.h"

namespace nrtsim {

class Runtime {
 public:
  // `engine_model` must have a section for the topology's chip; Error(kConfiguration) otherwise.
  Runtime(Topology topology, const std::map<std::string, CoreSpec>& engine_model);
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The process default: initialises on the first call from the environment and the default
  // engine model file. Throws Error(kConfiguration) for a bad environment and Error(kBadFork) in a
  // child forked after the parent initialised the runtime.
  static Runtime& get();
  static bool is_initialized() noexcept;
  static bool in_forked_child() noexcept;
  // What the environment describes, without initialising: for is_available()/device_count(),
  // which must neither throw nor initialise. 0 on a configuration error.
  static int visible_device_count() noexcept;
  // The configuration error that makes visible_device_count() 0, or "".
  static std::string configuration_error();

  const Topology& topology() const { return topology_; }
  const CoreModel& core_model() const { return core_model_; }
  int device_count() const { return topology_.device_count(); }
  NeuronCore& core(int device_index);  // throws Error(kInvalidDevice)
  int device_of(const void* ptr) const;  // the core whose HBM holds ptr, or -1
  void synchronize();                    // every core

 private:
  Topology topology_;
  CoreModel core_model_;
  std::vector<std::unique_ptr<NeuronCore>> cores_;
};

}  // namespace nrtsim
