#include "runtime/Runtime.h"

#include <pthread.h>

#include <atomic>
#include <mutex>

#include "runtime/Error.h"

namespace nrtsim {

namespace {
std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_forked_child{false};
// A mutex, not std::call_once: the runtime must be retried after a bad environment, and
// call_once after an exceptional run hangs on several libstdc++ targets (GCC PR 66146), musl
// and under ThreadSanitizer.
std::mutex g_init_mutex;

void mark_forked_child() {
  if (g_runtime.load() != nullptr) g_forked_child.store(true);
}
}  // namespace

namespace {
CoreModel model_for(const Topology& topology, const std::map<std::string, CoreSpec>& engine_model) {
  const std::string& chip = topology.instance().chip.name;
  const auto it = engine_model.find(chip);
  if (it == engine_model.end()) {
    throw Error(ErrorCode::kConfiguration,
                "the engine model has no [" + chip + "] section for " + topology.instance().name +
                    " (add it to the file NRTSIM_ENGINE_MODEL names, or unset the variable)");
  }
  return CoreModel(it->second, topology.lnc());
}

CoreLinks links_for(const Topology& topology, const CoreModel& model, const LinkModel* links) {
  if (links == nullptr) return CoreLinks();
  const ChipSpec& chip = topology.instance().chip;
  if (!links->chips.count(chip.name)) {
    throw Error(ErrorCode::kConfiguration,
                "the link model has no [chip." + chip.name + "] section for " +
                    topology.instance().name +
                    " (add it to the file NRTSIM_LINK_MODEL names, or unset the variable)");
  }
  return CoreLinks(*links, chip.name, chip.physical_cores / topology.lnc(),
                   model.hbm_bytes_per_ns());
}
}  // namespace

Runtime::Runtime(Topology topology, const std::map<std::string, CoreSpec>& engine_model,
                 const LinkModel* link_model)
    : topology_(std::move(topology)),
      core_model_(model_for(topology_, engine_model)),
      core_links_(links_for(topology_, core_model_, link_model)) {
  for (const auto& info : topology_.cores()) {
    cores_.push_back(std::make_unique<NeuronCore>(*this, info, core_model_, core_links_));
  }
}

Runtime& Runtime::get() {
  if (g_forked_child.load(std::memory_order_relaxed)) {
    throw Error(ErrorCode::kBadFork,
                "the neuron device was initialised in the parent process and cannot be used in a "
                "forked child. To use neuron with multiprocessing, use the 'spawn' start method "
                "(torch.multiprocessing.set_start_method('spawn'), or DataLoader "
                "multiprocessing_context='spawn')");
  }
  Runtime* runtime = g_runtime.load(std::memory_order_acquire);
  if (runtime != nullptr) return *runtime;
  std::lock_guard<std::mutex> lock(g_init_mutex);
  runtime = g_runtime.load(std::memory_order_acquire);
  if (runtime != nullptr) return *runtime;
  // If the environment is bad this throws before anything is stored; the next call retries.
  // Never destroyed: tensors held by static objects may be freed during exit.
  Topology topology = Topology::build(TopologyConfig::from_environment());
  const std::string model_path = default_engine_model_path();
  if (model_path.empty()) {
    throw Error(ErrorCode::kConfiguration,
                "no engine model file: set NRTSIM_ENGINE_MODEL to a file like "
                "torch_neuronx/data/neuron_cores.ini (importing torch_neuronx sets it)");
  }
  const std::string links_path = default_link_model_path();
  if (links_path.empty()) {
    throw Error(ErrorCode::kConfiguration,
                "no link model file: set NRTSIM_LINK_MODEL to a file like "
                "torch_neuronx/data/neuron_links.ini (importing torch_neuronx sets it)");
  }
  const LinkModel links = load_link_model(links_path);
  runtime = new Runtime(std::move(topology), load_engine_model(model_path), &links);
  pthread_atfork(nullptr, nullptr, mark_forked_child);
  g_runtime.store(runtime, std::memory_order_release);
  return *runtime;
}

bool Runtime::is_initialized() noexcept { return g_runtime.load() != nullptr; }

bool Runtime::in_forked_child() noexcept { return g_forked_child.load(); }

int Runtime::visible_device_count() noexcept {
  if (Runtime* runtime = g_runtime.load()) return runtime->device_count();
  try {
    return Topology::build(TopologyConfig::from_environment()).device_count();
  } catch (...) {
    return 0;
  }
}

std::string Runtime::configuration_error() {
  try {
    Topology::build(TopologyConfig::from_environment());
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

NeuronCore& Runtime::core(int device_index) {
  topology_.core(device_index);  // validates, with the message that lists the visible range
  return *cores_[device_index];
}

int Runtime::device_of(const void* ptr) const {
  for (const auto& core : cores_) {
    if (core->hbm().owns(ptr)) return core->device_index();
  }
  return -1;
}

void Runtime::synchronize() {
  for (auto& core : cores_) core->synchronize();
}

}  // namespace nrtsim
