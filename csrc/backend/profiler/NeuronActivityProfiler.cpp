// neuron's Kineto activity profiler: torch.profiler with ProfilerActivity.PrivateUse1 (and the
// legacy torch.autograd.profiler.profile(use_device="neuron", use_kineto=True)) reach
// NeuronProfilerSession through it. PyTorch hands the factory registered here to Kineto when
// Kineto initialises (torch/csrc/profiler/standalone/privateuse1_profiler.h).
#ifdef USE_KINETO

#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include "backend/profiler/NeuronProfilerSession.h"

namespace torch_neuronx::profiler {

namespace {

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& /*config*/) override {
    // Kineto offers every session the whole request; CPU-only profiling asks for none of the
    // device activities, and then nothing observes launches.
    const bool wants_device = activity_types.count(libkineto::ActivityType::CONCURRENT_KERNEL) ||
                              activity_types.count(libkineto::ActivityType::GPU_MEMCPY);
    if (!wants_device) return nullptr;
    return std::make_unique<NeuronProfilerSession>(activity_types);
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    // Sessions start and stop when Kineto says so; a deferred start needs nothing else here.
    return configure(activity_types, config);
  }

 private:
  const std::string name_{"neuron"};
  const std::set<libkineto::ActivityType> activities_{
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY,
      libkineto::ActivityType::GPU_USER_ANNOTATION, libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

}  // namespace

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

}  // namespace torch_neuronx::profiler

#endif  // USE_KINETO
