// A compiled program as one launch. torch.compile(backend="neuron") compiles each graph to CPU
// code (torch_neuronx/dynamo); this binding runs that code the way an eager kernel runs ATen's CPU
// math: over host views of the neuron inputs, with the fresh results allocated in HBM of the
// program's device, inside ONE launch record of kind kProgram carrying the summed work of the
// graph. The CPU code never dispatches to neuron, so the ops inside a program yield no records of
// their own: the profiler, op tracking and the simulated clock see the program as one unit.
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/core/Tensor.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
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
// without a copy when nothing outside the outputs holds its block.
class OutputAdopter {
 public:
  OutputAdopter(c10::Device device, const std::vector<at::Tensor>& neuron_inputs,
                const std::vector<at::Tensor>& views)
      : device_(device) {
    for (size_t i = 0; i < views.size(); ++i) {
      input_storage_[views[i].storage().data()] = neuron_inputs[i].storage();
    }
  }

  bool aliases_input(const at::Tensor& t) const {
    const void* data = t.storage().data();
    return data != nullptr && input_storage_.count(data) > 0;
  }

  void count_user(const at::Tensor& t) {
    users_[t.storage().unsafeGetStorageImpl()].insert(t.unsafeGetTensorImpl());
  }

  at::Tensor to_neuron(const at::Tensor& t) {
    c10::StorageImpl* host = t.storage().unsafeGetStorageImpl();
    auto aliased = input_storage_.find(host->data());
    if (aliased != input_storage_.end() && host->data() != nullptr) {
      return tensor_over(aliased->second, c10::DispatchKey::PrivateUse1, t);
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
    if (!in_hbm(host) || input_storage_.count(host->data())) return t;
    auto done = host_copies_.find(host);
    if (done == host_copies_.end()) {
      done = host_copies_.emplace(host, copy_storage(host, c10::GetCPUAllocator())).first;
    }
    return tensor_over(done->second, c10::DispatchKey::CPU, t);
  }

 private:
  c10::Device device_;
  std::unordered_map<const void*, c10::Storage> input_storage_;
  std::unordered_map<c10::StorageImpl*, std::unordered_set<c10::TensorImpl*>> users_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> host_copies_;
};

// Runs `program(args)` as one launch record `name` (kind program) on `device`. `args`: the
// program's inputs; neuron tensors are handed over as host views, everything else as is.
// `engine_ops`: {engine name: ops} of the whole graph; `bytes_engine`: the engine charged with the
// bytes the program reads and writes. `output_devices`: per output, the neuron device index it
// must end up on, -1 for a CPU tensor, or None for a non-tensor.
py::list launch_program(int device, const std::string& name, const py::dict& engine_ops,
                        const std::string& bytes_engine, const py::function& program,
                        const py::list& args, const py::list& output_devices) {
  const auto index = static_cast<c10::DeviceIndex>(device);
  check_device_index(index);
  const c10::Device neuron(c10::DeviceType::PrivateUse1, index);
  const char* op = nrtsim::intern(name);

  Cost cost(engine_named(bytes_engine));
  for (auto item : engine_ops) {
    cost.ops(engine_named(py::cast<std::string>(item.first)), py::cast<uint64_t>(item.second));
  }

  std::vector<at::Tensor> neuron_inputs;
  std::vector<at::Tensor> views;
  py::list host_args;
  for (py::handle arg : args) {
    if (THPVariable_Check(arg.ptr())) {
      const at::Tensor& t = THPVariable_Unpack(arg.ptr());
      if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) {
        cost.reads(t);
        neuron_inputs.push_back(t);
        views.push_back(host_view(t));
        host_args.append(py::cast(views.back()));
        continue;
      }
    }
    host_args.append(arg);
  }

  py::list outputs;
  launch_on(index, op, LaunchKind::kProgram, cost.work(), [&] {
    py::object returned;
    {
      const HostAllocationsInHbm results_in_hbm(index);
      returned = program(host_args);
    }
    host_args = py::list();  // the CPU code's hold on the inputs ends with the program
    const py::list results = py::list(returned);
    TORCH_CHECK(results.size() == output_devices.size(), "neuron program ", name, " returned ",
                results.size(), " outputs, its graph has ", output_devices.size());
    OutputAdopter adopter(neuron, neuron_inputs, views);
    std::vector<at::Tensor> tensors(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
      if (THPVariable_Check(results[i].ptr())) {
        tensors[i] = THPVariable_Unpack(results[i].ptr());
        if (tensors[i].defined()) adopter.count_user(tensors[i]);
      }
    }
    for (size_t i = 0; i < results.size(); ++i) {
      const py::handle target = output_devices[i];
      if (!tensors[i].defined() || target.is_none()) {
        outputs.append(results[i]);
        continue;
      }
      const int target_device = py::cast<int>(target);
      at::Tensor out;
      if (target_device < 0) {
        out = adopter.to_cpu(tensors[i]);
      } else {
        out = adopter.to_neuron(tensors[i]);
        if (!adopter.aliases_input(tensors[i])) cost.writes(out);
      }
      outputs.append(py::cast(out));
    }
  });
  return outputs;
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
  m.def("_launch_program", &launch_program, py::arg("device"), py::arg("name"),
        py::arg("engine_ops"), py::arg("bytes_engine"), py::arg("program"), py::arg("args"),
        py::arg("output_devices"));
  m.def("_program_host_generator", &program_host_generator, py::arg("device"),
        py::arg("count"));
}

}  // namespace torch_neuronx
