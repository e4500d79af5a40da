// The simulated instance, as one process sees it. Created lazily on first use from the
// environment, the way the Neuron runtime initialises on first device access.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/NeuronCore.h"
#include "runtime/Topology.h"

namespace nrtsim {

class Runtime {
 public:
  // Initialises on the first call. Throws Error(kConfiguration) for a bad environment and
  // Error(kBadFork) in a child forked after the parent initialised the runtime.
  static Runtime& get();
  static bool is_initialized() noexcept;
  static bool in_forked_child() noexcept;
  // What the environment describes, without initialising: for is_available()/device_count(),
  // which must neither throw nor initialise. 0 on a configuration error.
  static int visible_device_count() noexcept;
  // The configuration error that makes visible_device_count() 0, or "".
  static std::string configuration_error();

  const Topology& topology() const { return topology_; }
  int device_count() const { return topology_.device_count(); }
  NeuronCore& core(int device_index);  // throws Error(kInvalidDevice)
  int device_of(const void* ptr) const;  // the core whose HBM holds ptr, or -1
  void synchronize();                    // every core

 private:
  explicit Runtime(Topology topology);
  Topology topology_;
  std::vector<std::unique_ptr<NeuronCore>> cores_;
};

}  // namespace nrtsim
