// A compiled program as one launch. torch.compile(backend="neuron") compiles each graph to CPU
// code (torch_neuronx/dynamo); this binding runs that code the way an eager kernel runs ATen's CPU
// math, through the same service (core/HostView): over host views of the neuron inputs, with the
// fresh results allocated in HBM of the program's device and taken over as its outputs, inside
// ONE launch record of kind kProgram carrying the summed work of the graph. The CPU code never
// dispatches to neuron, so the ops inside a program yield no records of their own: the profiler,
// op tracking and the simulated clock see the program as one unit.
//
// A program compiled with Inductor's C++ wrapper is called here directly, through the wrapper's
// entry function in its shared library: the launch is one call from Python into C++, with no
// Python in between. Any other program (Inductor's Python wrapper) is called as the Python
// function Inductor made.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/inductor/aoti_torch/tensor_converter.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/TensorImpl.h>

#include <dlfcn.h>

#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/compiler/ProgramLaunch.h"
#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"
#include "backend/core/NeuronRuntime.h"
#include "runtime/Launch.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

nrtsim::Engine engine_named(const std::string& name) {
  for (nrtsim::Engine e : nrtsim::kAllEngines) {
    if (name == nrtsim::engine_name(e)) return e;
  }
  TORCH_CHECK(false, "neuron program: unknown engine '", name,
              "'; expected one of tensor, vector, scalar, gpsimd, dma");
}

// The entry function of a program built with Inductor's C++ wrapper (torch 2.13's JIT mode,
// codegen/cpp_wrapper_cpu.py): it steals the input handles, fills the output handles, and
// releases the GIL while it runs (so it is called with the GIL held).
using WrapperEntry = void (*)(AtenTensorHandle* inputs, AtenTensorHandle* outputs);
// `void inductor_entry_impl(AtenTensorHandle*, AtenTensorHandle*)`, C++-mangled: the wrapper
// declares it with C++ linkage and default visibility.
constexpr const char* kWrapperEntrySymbol = "_Z19inductor_entry_implPP16AtenTensorOpaqueS1_";

// The wrapper's library, already loaded by Inductor: held open for as long as the launcher
// calls into it.
class WrapperLibrary {
 public:
  explicit WrapperLibrary(const std::string& path)
      : handle_(::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    TORCH_CHECK(handle_ != nullptr, "neuron program: the C++ wrapper library ", path,
                " is not loaded: ", ::dlerror());
    entry_ = reinterpret_cast<WrapperEntry>(::dlsym(handle_, kWrapperEntrySymbol));
    TORCH_CHECK(entry_ != nullptr, "neuron program: ", path, " has no ", kWrapperEntrySymbol,
                " (Inductor's C++ wrapper entry): compile with TORCH_NEURONX_CPP_WRAPPER=0");
  }
  ~WrapperLibrary() { ::dlclose(handle_); }
  WrapperLibrary(const WrapperLibrary&) = delete;
  WrapperLibrary& operator=(const WrapperLibrary&) = delete;

  WrapperEntry entry() const { return entry_; }

 private:
  void* handle_;
  WrapperEntry entry_ = nullptr;
};

// A program argument that is not a tensor (a size of a symbolic graph), as the C++ wrapper takes
// it: the 0-dim CPU tensor torch.tensor(arg) would make.
at::Tensor scalar_argument(PyObject* arg) {
  if (PyBool_Check(arg)) return at::scalar_tensor(arg == Py_True, at::kBool);
  if (PyLong_Check(arg)) return at::scalar_tensor(py::cast<int64_t>(py::handle(arg)), at::kLong);
  if (PyFloat_Check(arg)) {
    return at::scalar_tensor(PyFloat_AS_DOUBLE(arg),
                             c10::typeMetaToScalarType(c10::get_default_dtype()));
  }
  // A SymInt or SymFloat that is not a plain number: what torch.tensor() does with it.
  return THPVariable_Unpack(
      py::module_::import("torch").attr("tensor")(py::handle(arg), py::arg("device") = "cpu").ptr());
}

// One compiled program, ready to launch: what is the same on every call (its device, record
// name, per-engine work of a static graph, output devices, the CPU code) is converted once, at
// compile time, so a call only does what depends on its arguments. A decode step is nothing but
// per-call overhead, and this launch sits on it once per step.
//
// Host views of the inputs are kept per argument position and re-pointed on each call: building
// a view (and, for a Python program, its Python object) for each of ~50 inputs was most of the
// launch's cost. A kept view is reused only when nothing but this launcher holds it (its Python
// object if any, its TensorImpl and its storage each have one owner), so a view the CPU code
// kept, or one still in use by another thread's call of the same program, is never re-pointed
// under it; a fresh one replaces it then.
//
// A program runs with the calling thread's intra-op threads, as Inductor's CPU code does.
class ProgramLauncher {
 public:
  static constexpr int kNotTensor = std::numeric_limits<int>::min();

  // `wrapper_library`: the shared library of the program's C++ wrapper, to call its entry
  // function directly, or None to call `program` (Inductor's Python callable).
  ProgramLauncher(int device, const std::string& name, const py::dict& engine_ops,
                  const std::string& bytes_engine, py::function program,
                  const py::list& output_devices, const py::object& wrapper_library)
      : device_(static_cast<c10::DeviceIndex>(device)),
        name_(name),
        op_(nrtsim::intern(name)),
        bytes_engine_(engine_named(bytes_engine)),
        ops_(parse_ops(engine_ops)),
        program_(std::move(program)) {
    check_device_index(device_);
    for (py::handle target : output_devices) {
      output_devices_.push_back(target.is_none() ? kNotTensor : py::cast<int>(target));
    }
    if (!wrapper_library.is_none()) {
      library_ = std::make_unique<WrapperLibrary>(py::cast<std::string>(wrapper_library));
    }
  }

  bool calls_wrapper_directly() const { return library_ != nullptr; }

  // Runs the program on `args` as one launch record. `engine_ops`: None for the work given at
  // construction, or {engine: ops} of this call (a symbolic graph's work depends on its sizes).
  py::list operator()(const py::list& args, const py::object& engine_ops) {
    Cost cost(bytes_engine_);
    for (const auto& [engine, n] : engine_ops.is_none() ? ops_ : parse_ops(engine_ops)) {
      cost.ops(engine, n);
    }
    const size_t n = args.size();
    Call call;
    call.inputs.reserve(n);
    call.view_args.reserve(n);
    if (library_) {
      call.host_inputs.reserve(n);
    } else {
      call.host_args = py::list(n);
    }
    if (views_.size() < n) {
      views_.resize(n);
      py_views_.resize(n);
    }
    for (size_t i = 0; i < n; ++i) {
      PyObject* arg = PyList_GET_ITEM(args.ptr(), i);
      if (THPVariable_Check(arg)) {
        const at::Tensor& t = THPVariable_Unpack(arg);
        if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) {
          cost.reads(t);
          call.inputs.emplace_back(t.storage().data(), t.storage());
          if (library_) {
            const at::Tensor& view = view_of(i, t);
            call.view_args.emplace_back(view.unsafeGetTensorImpl(), arg);
            call.host_inputs.push_back(view);
          } else {
            PyObject* view = py_view_of(i, t);
            call.view_args.emplace_back(THPVariable_Unpack(view).unsafeGetTensorImpl(), arg);
            Py_INCREF(view);
            PyList_SET_ITEM(call.host_args.ptr(), i, view);
          }
          continue;
        }
        if (library_) {
          call.host_inputs.push_back(t);
          continue;
        }
      } else if (library_) {
        call.host_inputs.push_back(scalar_argument(arg));
        continue;
      }
      Py_INCREF(arg);
      PyList_SET_ITEM(call.host_args.ptr(), i, arg);
    }

    py::list outputs;
    launch_on(device_, op_, LaunchKind::kProgram, cost.work(), [&] {
      std::vector<at::Tensor> results;
      std::vector<py::object> returned;  // the Python program's results, as it returned them
      {
        const HostAllocationsInHbm results_in_hbm(device_);
        if (library_) {
          results = run_wrapper(std::move(call.host_inputs));
        } else {
          returned = run_python(call.host_args, results);
        }
      }
      TORCH_CHECK(results.size() == output_devices_.size(), "neuron program ", name_,
                  " returned ", results.size(), " outputs, its graph has ",
                  output_devices_.size());
      HostResults adopter(c10::Device(c10::DeviceType::PrivateUse1, device_),
                          std::move(call.inputs));
      for (const at::Tensor& t : results) {
        if (t.defined()) adopter.count_user(t);
      }
      for (size_t i = 0; i < results.size(); ++i) {
        const at::Tensor& t = results[i];
        const int target = output_devices_[i];
        if (!t.defined() || target == kNotTensor) {
          outputs.append(returned.empty() ? (t.defined() ? py::cast(t) : py::none())
                                          : returned[i]);
          continue;
        }
        // Looked for only among outputs over an input's storage: fresh results skip the scan.
        PyObject* arg =
            adopter.aliases_input(t) ? argument_returned(call.view_args, t) : nullptr;
        if (arg != nullptr) {
          // The program returned an input as it is: the output is that input itself, as from
          // Inductor's code, not a new alias of it. AOTAutograd saves such outputs for the
          // backward, and only the input itself keeps its autograd identity there (a double
          // backward then reaches the input and reports it is not supported, as on the CPU).
          outputs.append(py::reinterpret_borrow<py::object>(arg));
          continue;
        }
        at::Tensor out;
        if (target < 0) {
          out = adopter.to_cpu(t);
        } else {
          out = adopter.to_neuron(t);
          if (!adopter.aliases_input(t)) cost.writes(out);
        }
        outputs.append(py::cast(out));
      }
    });
    return outputs;
  }

 private:
  using EngineOps = std::vector<std::pair<nrtsim::Engine, uint64_t>>;

  // What one call gathers from its arguments.
  struct Call {
    // (host view data pointer, neuron storage) of each neuron input.
    std::vector<std::pair<const void*, c10::Storage>> inputs;
    // (host view, neuron argument) of each neuron input, borrowed: `args` holds the arguments
    // for the call, and the launcher's slots the views.
    std::vector<std::pair<const c10::TensorImpl*, PyObject*>> view_args;
    std::vector<at::Tensor> host_inputs;  // for the C++ wrapper
    py::list host_args;                   // for a Python program
  };

  static EngineOps parse_ops(const py::handle& engine_ops) {
    EngineOps ops;
    for (auto item : py::reinterpret_borrow<py::dict>(engine_ops)) {
      ops.emplace_back(engine_named(py::cast<std::string>(item.first)),
                       py::cast<uint64_t>(item.second));
    }
    return ops;
  }

  // The C++ wrapper's entry on new handles to the inputs (it steals them; the host views the
  // launcher keeps stay its own), its outputs taken from the handles it filled.
  std::vector<at::Tensor> run_wrapper(std::vector<at::Tensor> host_inputs) {
    std::vector<AtenTensorHandle> input_handles =
        torch::aot_inductor::unsafe_alloc_new_handles_from_tensors(host_inputs);
    host_inputs.clear();  // the program's hold on its inputs ends with the program, as Inductor's
    std::vector<AtenTensorHandle> output_handles(output_devices_.size(), nullptr);
    library_->entry()(input_handles.data(), output_handles.data());
    return torch::aot_inductor::alloc_tensors_by_stealing_from_handles(output_handles.data(),
                                                                       output_handles.size());
  }

  // Inductor's Python callable on `host_args`; `results` gets the tensors it returned (undefined
  // where it returned something else), and the return value is what it returned.
  std::vector<py::object> run_python(py::list& host_args, std::vector<at::Tensor>& results) {
    const py::object returned = program_(host_args);
    host_args = py::list();  // the CPU code's hold on the inputs ends with the program
    std::vector<py::object> values;
    for (py::handle value : py::list(returned)) {
      values.push_back(py::reinterpret_borrow<py::object>(value));
      results.push_back(THPVariable_Check(value.ptr()) ? THPVariable_Unpack(value.ptr())
                                                       : at::Tensor());
    }
    return values;
  }

  // The neuron argument whose host view is `returned`, or null.
  static PyObject* argument_returned(
      const std::vector<std::pair<const c10::TensorImpl*, PyObject*>>& view_args,
      const at::Tensor& returned) {
    for (const auto& [view, arg] : view_args) {
      if (view == returned.unsafeGetTensorImpl()) return arg;
    }
    return nullptr;
  }

  static bool only_held_here(const at::Tensor& v) {
    return v.use_count() == 1 && v.weak_use_count() == 1 && v.storage().use_count() == 1;
  }

  // The host view for argument `i`, pointed at neuron tensor `t` (for the C++ wrapper).
  const at::Tensor& view_of(size_t i, const at::Tensor& t) {
    at::Tensor& slot = views_[i];
    if (!slot.defined() || !only_held_here(slot)) slot = empty_host_view();
    point_at(slot, t);
    return slot;
  }

  // The host view for argument `i` as a Python object (borrowed), for a Python program.
  PyObject* py_view_of(size_t i, const at::Tensor& t) {
    py::object& slot = py_views_[i];
    if (!slot || Py_REFCNT(slot.ptr()) != 1 || !only_held_here(THPVariable_Unpack(slot.ptr()))) {
      slot = py::reinterpret_steal<py::object>(THPVariable_Wrap(empty_host_view()));
    }
    point_at(THPVariable_Unpack(slot.ptr()), t);
    return slot.ptr();
  }

  c10::DeviceIndex device_;
  std::string name_;
  const char* op_;
  nrtsim::Engine bytes_engine_;
  EngineOps ops_;
  py::function program_;
  std::unique_ptr<WrapperLibrary> library_;
  std::vector<int> output_devices_;
  std::vector<at::Tensor> views_;
  std::vector<py::object> py_views_;
};

}  // namespace

void init_compiler_bindings(py::module& m) {
  py::class_<ProgramLauncher>(m, "_ProgramLauncher")
      .def(py::init<int, const std::string&, const py::dict&, const std::string&, py::function,
                    const py::list&, const py::object&>(),
           py::arg("device"), py::arg("name"), py::arg("engine_ops"), py::arg("bytes_engine"),
           py::arg("program"), py::arg("output_devices"), py::arg("wrapper_library") = py::none())
      .def_property_readonly("calls_wrapper_directly", &ProgramLauncher::calls_wrapper_directly)
      .def("__call__", &ProgramLauncher::operator(), py::arg("args"),
           py::arg("engine_ops") = py::none());
}

}  // namespace torch_neuronx
