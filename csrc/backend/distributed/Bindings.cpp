// Python binding of ProcessGroupNeuron: torch_neuronx._C._distributed.ProcessGroupNeuron, a
// subclass of torch.distributed's Backend. torch_neuronx.distributed registers it as the backend
// "neuron".
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "backend/distributed/Bindings.h"
#include "backend/distributed/ProcessGroupNeuron.h"
#include "runtime/InstancePreset.h"
#include "runtime/Topology.h"

namespace py = pybind11;

namespace torch_neuronx::distributed {
namespace {

// torch binds c10d::Backend with a holder that drops its reference without the GIL (a backend's
// destructor may wait on other threads). A subclass must use a holder of the same shape.
template <class T>
class NoGilHolder {
 public:
  NoGilHolder() = default;
  explicit NoGilHolder(T* raw) : ptr_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(raw)) {}
  explicit NoGilHolder(c10::intrusive_ptr<T> ptr) : ptr_(std::move(ptr)) {}
  NoGilHolder(const NoGilHolder&) = default;
  NoGilHolder(NoGilHolder&&) noexcept = default;
  NoGilHolder& operator=(const NoGilHolder&) = default;
  NoGilHolder& operator=(NoGilHolder&&) noexcept = default;
  ~NoGilHolder() {
    if (ptr_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      ptr_.reset();
    }
  }
  T* get() const noexcept { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;
};

}  // namespace
}  // namespace torch_neuronx::distributed

PYBIND11_DECLARE_HOLDER_TYPE(T, torch_neuronx::distributed::NoGilHolder<T>, true)

namespace torch_neuronx::distributed {

void init_distributed_bindings(py::module& m) {
  // The base class lives in torch._C._distributed_c10d, registered when torch.distributed loads.
  py::module dist = py::module::import("torch.distributed");
  if (!dist.attr("is_available")().cast<bool>()) return;
  py::module c10d = py::module::import("torch._C._distributed_c10d");
  py::object backend = c10d.attr("Backend");

  auto sub = m.def_submodule("_distributed", "the neuron process-group backend");
  py::class_<ProcessGroupNeuron, c10d::Backend, NoGilHolder<ProcessGroupNeuron>>(
      sub, "ProcessGroupNeuron")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return NoGilHolder<ProcessGroupNeuron>(c10::make_intrusive<ProcessGroupNeuron>(
                 store, rank, size, c10::make_intrusive<ProcessGroupNeuron::Options>(timeout)));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def("_abort_transport", &ProcessGroupNeuron::abort,
           py::call_guard<py::gil_scoped_release>());
  // The Gloo groups of a group that spans hosts are built by `factory(store, rank, size,
  // timeout)` in Python (torch's binding of ProcessGroupGloo: its C++ header needs Gloo's, which
  // the wheel does not ship). Called from C++ (group creation, split) without the GIL held.
  sub.def("_set_gloo_factory", [](py::object factory) {
    // Kept for the life of the process: it may be called until exit.
    auto* held = new py::object(std::move(factory));
    set_gloo_factory([held](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                            std::chrono::milliseconds timeout) {
      py::gil_scoped_acquire gil;
      py::object group = (*held)(store, rank, size, timeout);
      auto* backend = group.cast<c10d::Backend*>();
      if (backend == nullptr) {
        throw std::runtime_error("neuron process group: the Gloo factory returned no backend");
      }
      return c10::intrusive_ptr<c10d::Backend>::reclaim_copy(backend);
    });
  });
  // Work.get_sequence_number(), as TorchNeuron's Works have it: c10d's Work binding does not
  // expose the virtual it calls (Works of other backends raise that they have none).
  sub.def("_work_sequence_number", [](const c10::intrusive_ptr<c10d::Work>& work) {
    return work->getSequencenumber();
  });
  // The logical NeuronCores of the simulated instance this process would start (NRTSIM_INSTANCE,
  // NEURON_LOGICAL_NC_CONFIG), and every preset's at its default setting, without starting the
  // runtime: torchrun's layout gives each local rank one core, and a job with more local ranks
  // than cores needs to hear which instance has enough.
  sub.def("_instance_cores", [] {
    const nrtsim::TopologyConfig config = nrtsim::TopologyConfig::from_environment();
    const nrtsim::InstancePreset& preset = nrtsim::find_preset(config.instance);
    const int lnc = config.lnc.value_or(preset.chip.default_lnc);
    py::list presets;
    for (const auto& p : nrtsim::all_presets()) {
      presets.append(py::make_tuple(p.name, p.physical_cores() / p.chip.default_lnc));
    }
    py::dict d;
    d["instance"] = preset.name;
    d["lnc"] = lnc;
    d["cores"] = preset.physical_cores() / lnc;
    d["presets"] = presets;
    return d;
  });
  (void)backend;
}

}  // namespace torch_neuronx::distributed
