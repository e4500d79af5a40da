// The simulated instance, as one process sees it: a Topology (which logical cores are visible),
// the engine model and the link model of its chip, each core with its HBM, streams and simulated
// clock.
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
#include "runtime/LinkModel.h"
#include "runtime/NeuronCore.h"
#include "runtime/Topology.h"

namespace nrtsim {

class Runtime {
 public:
  // `engine_model` must have a section for the topology's chip, and `link_model` (when given) a
  // chip section for it; Error(kConfiguration) otherwise. Without a link model, collectives cost
  // their launch only (runtime unit tests that run none).
  Runtime(Topology topology, const std::map<std::string, CoreSpec>& engine_model,
          const LinkModel* link_model = nullptr);
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The process default: initialises on the first call from the environment and the default
  // engine and link model files. Throws Error(kConfiguration) for a bad environment and Error(kBadFork) in a
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
  const CoreLinks& core_links() const { return core_links_; }
  int device_count() const { return topology_.device_count(); }
  NeuronCore& core(int device_index);  // throws Error(kInvalidDevice)
  int device_of(const void* ptr) const;  // the core whose HBM holds ptr, or -1
  void synchronize();                    // every core

 private:
  Topology topology_;
  CoreModel core_model_;
  CoreLinks core_links_;
  std::vector<std::unique_ptr<NeuronCore>> cores_;
};

}  // namespace nrtsim
