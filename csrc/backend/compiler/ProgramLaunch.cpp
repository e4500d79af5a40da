// A compiled program as one launch. torch.compile(backend="neuron") compiles each graph to CPU
// code (torch_neuronx/dynamo); this binding runs that code the way an eager kernel runs ATen's CPU
// math: over host views of the neuron inputs, with the fresh results allocated in HBM of the
// program's device, inside ONE launch record of kind kProgram carrying the work of the graph, as
// the op-work table gave it per op at compile time (torch_neuronx/dynamo/program_work.py). The CPU code never dispatches to neuron, so the ops inside a program yield no records of
// their own: the profiler, op tracking and the simulated clock see the program as one unit.
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/core/Tensor.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/compiler/ProgramLaunch.h"
#include "backend/core/CachingAllocator.h"
#include "backend/core/Generator.h"
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

nrtsim::Precision precision_named(const std::string& name) {
  for (nrtsim::Precision p :
       {nrtsim::Precision::kFp32, nrtsim::Precision::kBf16, nrtsim::Precision::kFp8}) {
    if (name == nrtsim::precision_name(p)) return p;
  }
  TORCH_CHECK(false, "neuron program: unknown number format '", name,
              "'; expected one of fp32, bf16, fp8");
}

// {"engines": {engine: (ops, bytes_read, bytes_written)}, "precision": name}, as
// program_work.ProgramWork.work() gives it.
nrtsim::Work work_of(const py::handle& description) {
  const auto d = py::reinterpret_borrow<py::dict>(description);
  nrtsim::Work work;
  for (auto item : py::reinterpret_borrow<py::dict>(d["engines"])) {
    const auto t = py::reinterpret_borrow<py::tuple>(item.second);
    nrtsim::EngineWork& e = work[engine_named(py::cast<std::string>(item.first))];
    e.ops = py::cast<uint64_t>(t[0]);
    e.bytes_read = py::cast<uint64_t>(t[1]);
    e.bytes_written = py::cast<uint64_t>(t[2]);
  }
  work.precision = precision_named(py::cast<std::string>(d["precision"]));
  return work;
}

bool in_hbm(const c10::StorageImpl* storage) {
  return storage->data_ptr().get_deleter() == caching_allocator().raw_deleter();
}

// A tensor of `keys` over `storage` with the sizes, strides, offset and dtype of `like`.
at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                          c10::DispatchKeySet(key), like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                 like.storage_offset());
  t.unsafeGetTensorImpl()->_set_conj(like.is_conj());
  t.unsafeGetTensorImpl()->_set_neg(like.is_neg());
  return t;
}

c10::Storage copy_storage(const c10::StorageImpl* source, c10::Allocator* allocator) {
  const size_t nbytes = source->nbytes();
  c10::Storage copy(c10::Storage::use_byte_size_t(), nbytes, allocator->allocate(nbytes), allocator,
                    /*resizable=*/true);
  if (nbytes > 0) std::memcpy(copy.mutable_data(), source->data(), nbytes);
  return copy;
}

// Turns what the CPU code returned into the program's outputs. Outputs that share a storage keep
// sharing one (AOTAutograd regenerates views of outputs from their base), an output that aliases
// an input becomes the same alias of the neuron input, and a fresh result in HBM is taken over
// without a copy when nothing outside the outputs holds its block. Per call it costs work in the
// number of outputs; the inputs are looked up in a sorted vector built once per call (a decode
// step has ~50 inputs and one output).
class OutputAdopter {
 public:
  // `inputs`: (host view data pointer, neuron storage) of each neuron input.
  OutputAdopter(c10::Device device, std::vector<std::pair<const void*, c10::Storage>> inputs)
      : device_(device), inputs_(std::move(inputs)) {
    std::sort(inputs_.begin(), inputs_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
  }

  bool aliases_input(const at::Tensor& t) const { return input_storage(t.storage().data()); }

  void count_user(const at::Tensor& t) {
    users_[t.storage().unsafeGetStorageImpl()].insert(t.unsafeGetTensorImpl());
  }

  at::Tensor to_neuron(const at::Tensor& t) {
    c10::StorageImpl* host = t.storage().unsafeGetStorageImpl();
    if (const c10::Storage* aliased = input_storage(host->data())) {
      return tensor_over(*aliased, c10::DispatchKey::PrivateUse1, t);
    }
    auto done = adopted_.find(host);
    if (done == adopted_.end()) {
      c10::Storage storage;
      if (in_hbm(host) && t.storage().use_count() == users_[host].size()) {
        // Only the outputs hold this HBM block: hand it to a neuron storage, no copy.
        const size_t nbytes = host->nbytes();
        c10::DataPtr block = host->set_data_ptr(c10::DataPtr());
        block.unsafe_set_device(device_);
        storage = c10::Storage(c10::Storage::use_byte_size_t(), nbytes, std::move(block),
                               &caching_allocator(), /*resizable=*/true);
      } else {
        storage = copy_storage(host, &caching_allocator());
      }
      done = adopted_.emplace(host, std::move(storage)).first;
    }
    return tensor_over(done->second, c10::DispatchKey::PrivateUse1, t);
  }

  // An output the graph produces on the CPU (a .cpu() inside the graph): if the CPU code put it in
  // HBM, it is copied to host memory; CPU inputs it aliases stay as they are.
  at::Tensor to_cpu(const at::Tensor& t) {
    c10::StorageImpl* host = t.storage().unsafeGetStorageImpl();
    if (!in_hbm(host) || input_storage(host->data())) return t;
    auto done = host_copies_.find(host);
    if (done == host_copies_.end()) {
      done = host_copies_.emplace(host, copy_storage(host, c10::GetCPUAllocator())).first;
    }
    return tensor_over(done->second, c10::DispatchKey::CPU, t);
  }

 private:
  // The neuron storage whose bytes start at `data` (a host view's), or null.
  const c10::Storage* input_storage(const void* data) const {
    if (data == nullptr) return nullptr;
    auto it = std::lower_bound(inputs_.begin(), inputs_.end(), data,
                               [](const auto& entry, const void* d) { return entry.first < d; });
    return it != inputs_.end() && it->first == data ? &it->second : nullptr;
  }

  c10::Device device_;
  std::vector<std::pair<const void*, c10::Storage>> inputs_;
  std::unordered_map<c10::StorageImpl*, std::unordered_set<c10::TensorImpl*>> users_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> host_copies_;
};

// One compiled program, ready to launch: what is the same on every call (its device, record
// name, work of a static graph, output devices, the CPU code) is converted once, at
// compile time, so a call only does what depends on its arguments. A decode step is nothing but
// per-call overhead, and this launch sits on it once per step.
//
// Host views of the inputs are kept per argument position and re-pointed on each call: building
// a view and its Python object for each of ~50 inputs was most of the launch's cost. A kept view
// is reused only when nothing but this launcher holds it (its Python object, its TensorImpl and
// its storage each have one owner), so a view the CPU code kept, or one still in use by another
// thread's call of the same program, is never re-pointed under it; a fresh one replaces it then.
//
// A program runs with the calling thread's intra-op threads, as Inductor's CPU code does.
class ProgramLauncher {
 public:
  static constexpr int kNotTensor = std::numeric_limits<int>::min();

  ProgramLauncher(int device, const std::string& name, const py::object& work,
                  py::function program, const py::list& output_devices)
      : device_(static_cast<c10::DeviceIndex>(device)),
        name_(name),
        op_(nrtsim::intern(name)),
        work_(work.is_none() ? nrtsim::Work() : work_of(work)),
        program_(std::move(program)) {
    check_device_index(device_);
    for (py::handle target : output_devices) {
      output_devices_.push_back(target.is_none() ? kNotTensor : py::cast<int>(target));
    }
  }

  // Runs the program on `args` as one launch record. `work`: None for the work given at
  // construction, or this call's (a symbolic graph's work depends on its sizes).
  py::list operator()(const py::list& args, const py::object& work) {
    const c10::Device neuron(c10::DeviceType::PrivateUse1, device_);
    const nrtsim::Work call_work = work.is_none() ? work_ : work_of(work);

    const size_t n = args.size();
    if (views_.size() < n) views_.resize(n);
    std::vector<std::pair<const void*, c10::Storage>> inputs;
    inputs.reserve(n);
    // (host view, neuron argument) of each neuron input, borrowed: `args` holds both for the call.
    std::vector<std::pair<PyObject*, PyObject*>> view_args;
    view_args.reserve(n);
    py::list host_args(n);
    for (size_t i = 0; i < n; ++i) {
      PyObject* arg = PyList_GET_ITEM(args.ptr(), i);
      if (THPVariable_Check(arg)) {
        const at::Tensor& t = THPVariable_Unpack(arg);
        if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) {
          PyObject* view = view_of(i, t);
          inputs.emplace_back(t.storage().data(), t.storage());
          view_args.emplace_back(view, arg);
          Py_INCREF(view);
          PyList_SET_ITEM(host_args.ptr(), i, view);
          continue;
        }
      }
      Py_INCREF(arg);
      PyList_SET_ITEM(host_args.ptr(), i, arg);
    }

    py::list outputs;
    launch_on(device_, op_, LaunchKind::kProgram, call_work, [&] {
      py::object returned;
      {
        const HostAllocationsInHbm results_in_hbm(device_);
        returned = program_(host_args);
      }
      host_args = py::list();  // the CPU code's hold on the inputs ends with the program
      const py::list results = py::list(returned);
      TORCH_CHECK(results.size() == output_devices_.size(), "neuron program ", name_,
                  " returned ", results.size(), " outputs, its graph has ",
                  output_devices_.size());
      OutputAdopter adopter(neuron, std::move(inputs));
      std::vector<at::Tensor> tensors(results.size());
      for (size_t i = 0; i < results.size(); ++i) {
        if (THPVariable_Check(results[i].ptr())) {
          tensors[i] = THPVariable_Unpack(results[i].ptr());
          if (tensors[i].defined()) adopter.count_user(tensors[i]);
        }
      }
      for (size_t i = 0; i < results.size(); ++i) {
        const int target = output_devices_[i];
        if (!tensors[i].defined() || target == kNotTensor) {
          outputs.append(results[i]);
          continue;
        }
        // Looked for only among outputs over an input's storage: fresh results skip the scan.
        PyObject* arg = adopter.aliases_input(tensors[i])
                            ? argument_returned(view_args, results[i].ptr())
                            : nullptr;
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
          out = adopter.to_cpu(tensors[i]);
        } else {
          out = adopter.to_neuron(tensors[i]);
        }
        outputs.append(py::cast(out));
      }
    });
    return outputs;
  }

 private:
  // The neuron argument whose host view is `returned`, or null.
  static PyObject* argument_returned(const std::vector<std::pair<PyObject*, PyObject*>>& view_args,
                                     PyObject* returned) {
    for (const auto& [view, arg] : view_args) {
      if (view == returned) return arg;
    }
    return nullptr;
  }

  // The host view for argument `i`, pointed at neuron tensor `t` (borrowed reference).
  PyObject* view_of(size_t i, const at::Tensor& t) {
    py::object& slot = views_[i];
    if (!slot || !only_held_here(slot.ptr())) {
      slot = py::reinterpret_steal<py::object>(THPVariable_Wrap(empty_view()));
    }
    point_at(THPVariable_Unpack(slot.ptr()).unsafeGetTensorImpl(), t);
    return slot.ptr();
  }

  static bool only_held_here(PyObject* view) {
    const at::Tensor& v = THPVariable_Unpack(view);
    return Py_REFCNT(view) == 1 && v.use_count() == 1 && v.weak_use_count() == 1 &&
           v.storage().use_count() == 1;
  }

  // A CPU tensor over a non-owning, empty storage: re-pointed at an input before each use.
  static at::Tensor empty_view() {
    c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                         c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)), nullptr,
                         /*resizable=*/false);
    return at::Tensor(c10::make_intrusive<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
        caffe2::TypeMeta::Make<float>()));
  }

  // What host_view() (core/HostView.cpp) does to its pooled views: the same bytes, sizes,
  // strides, offset and dtype as `t`, through a storage that does not own them (the neuron
  // tensor keeps the memory alive while the program runs).
  static void point_at(c10::TensorImpl* impl, const at::Tensor& t) {
    const c10::Storage& storage = t.storage();
    c10::StorageImpl* alias = impl->storage().unsafeGetStorageImpl();
    alias->set_data_ptr_noswap(
        c10::DataPtr(storage.mutable_data(), c10::Device(c10::DeviceType::CPU)));
    alias->set_nbytes(storage.nbytes());
    impl->set_storage_and_dtype(impl->storage(), t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    impl->_set_conj(t.is_conj());
    impl->_set_neg(t.is_neg());
  }

  c10::DeviceIndex device_;
  std::string name_;
  const char* op_;
  nrtsim::Work work_;
  py::function program_;
  std::vector<int> output_devices_;
  std::vector<py::object> views_;
};

// One call of a program that is not kept (the launcher's work done once).
py::list launch_program(int device, const std::string& name, const py::object& work,
                        const py::function& program, const py::list& args,
                        const py::list& output_devices) {
  ProgramLauncher launcher(device, name, work, program, output_devices);
  return launcher(args, py::none());
}

// A CPU generator producing the `count` values reserved now from neuron:`device`'s default
// generator: how a random op inside a program draws from the neuron stream exactly as the eager
// kernel would at the same point (torch_neuronx/dynamo/random_ops.py).
py::object program_host_generator(int device, uint64_t count) {
  TORCH_CHECK(device >= 0, "neuron program: random op on device index ", device);
  const at::Generator host =
      host_generator_for(std::nullopt, static_cast<c10::DeviceIndex>(device), count);
  return py::reinterpret_steal<py::object>(THPGenerator_Wrap(host));
}

}  // namespace

void init_compiler_bindings(py::module& m) {
  py::class_<ProgramLauncher>(m, "_ProgramLauncher")
      .def(py::init<int, const std::string&, const py::object&, py::function, const py::list&>(),
           py::arg("device"), py::arg("name"), py::arg("work"), py::arg("program"),
           py::arg("output_devices"))
      .def("__call__", &ProgramLauncher::operator(), py::arg("args"),
           py::arg("work") = py::none());
  m.def("_launch_program", &launch_program, py::arg("device"), py::arg("name"), py::arg("work"),
        py::arg("program"), py::arg("args"), py::arg("output_devices"));
  m.def("_program_host_generator", &program_host_generator, py::arg("device"),
        py::arg("count"));
}

}  // namespace torch_neuronx
