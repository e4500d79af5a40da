// nki._nki: the nki package's binding to the runtime's NKI interpreter. The Python front end
// traces a kernel into buffers and instructions (nki._core); Executable turns them into the
// runtime's Executable, runs it on host memory (NumPy arrays, CPU tensors) and times it on a
// core of the engine model. Devices (torch_neuronx's neuron) launch the same Executable through
// its capsule, and a host with a tuned GEMM lends it through set_host_kernels. No torch here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "nki/HostKernels.h"
#include "nki/TilesDict.h"
#include "nki/TimelineDict.h"
#include "runtime/EngineModel.h"
#include "runtime/Error.h"
#include "runtime/nki/DmaModel.h"
#include "runtime/nki/Interpreter.h"
#include "runtime/nki/PartitionWorkers.h"
#include "runtime/nki/Timeline.h"

namespace py = pybind11;

namespace {

using nrtsim::nki::Executable;

nrtsim::nki::HostKernels g_host;  // set by set_host_kernels; the runtime's loop GEMM otherwise

// The exchange of collective instructions with the other ranks (runtime/nki/Collective.h): the
// Python callable nki.collectives installs (set_collective_exchange), called with the GIL held
// as exchange(description, kind, send, receive, metadata), each tile a writable (memoryview,
// dtype code, shape) over the interpreter's staging bytes, valid during the call. Host runs pass
// it to the interpreter; a device's launch gets it through collective_exchange()'s capsule. The
// callable is never released: it lives as long as the process (its destructor would run after
// the interpreter has gone).
nrtsim::nki::CollectiveHook g_collectives;

py::tuple tile_of(nrtsim::nki::StagedTile& t, bool writable) {
  return py::make_tuple(
      py::memoryview::from_memory(t.bytes.data(), static_cast<py::ssize_t>(t.bytes.size()),
                                  !writable),
      static_cast<int>(t.dtype), py::cast(t.shape));
}

void set_collective_exchange(const py::function& fn) {
  auto* held = new py::function(fn);
  g_collectives = [held](nrtsim::nki::CollectiveExchange& x) {
    py::gil_scoped_acquire gil;
    (*held)(x.instruction->text, nrtsim::nki::collective_kind_name(x.kind), tile_of(x.send, true),
            tile_of(x.receive, true), tile_of(x.metadata, true));
  };
}

const nrtsim::nki::CollectiveHook* collectives() {
  return g_collectives ? &g_collectives : nullptr;
}

nrtsim::nki::View view_from(const py::handle& h) {
  nrtsim::nki::View v;
  if (h.is_none()) return v;
  const auto t = h.cast<py::tuple>();
  v.buffer = t[0].cast<int32_t>();
  v.offset = t[1].cast<int64_t>();
  const auto shape = t[2].cast<std::vector<int64_t>>();
  const auto stride = t[3].cast<std::vector<int64_t>>();
  if (shape.size() != stride.size() || shape.size() > nrtsim::nki::kMaxDims) {
    throw py::value_error("NKI: a view has " + std::to_string(shape.size()) + " dims; at most " +
                          std::to_string(nrtsim::nki::kMaxDims));
  }
  v.ndim = static_cast<int32_t>(shape.size());
  v.dtype = t.size() > 4 ? t[4].cast<int32_t>() : -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    v.shape[i] = shape[i];
    v.stride[i] = stride[i];
  }
  return v;
}

nrtsim::nki::Program program_from(const std::string& name, const py::list& buffers,
                                  const py::list& instructions) {
  nrtsim::nki::Program p;
  p.name = name;
  for (py::handle b : buffers) {
    const auto t = b.cast<py::tuple>();
    nrtsim::nki::Buffer buf;
    buf.memory = static_cast<nrtsim::nki::Memory>(t[0].cast<int>());
    buf.dtype = static_cast<nrtsim::nki::DType>(t[1].cast<int>());
    buf.elements = t[2].cast<int64_t>();
    buf.binding = t[3].cast<int32_t>();
    buf.poison = t[4].cast<bool>();
    p.buffers.push_back(buf);
  }
  for (py::handle h : instructions) {
    const auto t = h.cast<py::tuple>();
    // The field order of nki._core.Instr.encode().
    if (t.size() != 28) {
      throw py::value_error("NKI: an instruction has " + std::to_string(t.size()) +
                            " fields, expected 28");
    }
    nrtsim::nki::Instruction in;
    in.op = static_cast<nrtsim::nki::Opcode>(t[0].cast<int>());
    in.engine = static_cast<nrtsim::Engine>(t[1].cast<int>());
    in.program = t[2].cast<int32_t>();
    in.line = t[3].cast<int32_t>();
    in.dst = view_from(t[4]);
    in.a = view_from(t[5]);
    in.b = view_from(t[6]);
    in.c = view_from(t[7]);
    in.d = view_from(t[8]);
    in.e = view_from(t[9]);
    in.f = view_from(t[10]);
    in.alu0 = static_cast<nrtsim::nki::Alu>(t[11].cast<int>());
    in.alu1 = static_cast<nrtsim::nki::Alu>(t[12].cast<int>());
    in.alu2 = static_cast<nrtsim::nki::Alu>(t[13].cast<int>());
    in.reverse0 = t[14].cast<bool>();
    in.reverse1 = t[15].cast<bool>();
    in.imm0 = t[16].cast<double>();
    in.imm1 = t[17].cast<double>();
    in.imm2 = t[18].cast<double>();
    in.act = static_cast<nrtsim::nki::Act>(t[19].cast<int>());
    in.axes = t[20].cast<uint32_t>();
    in.negate = t[21].cast<bool>();
    in.accumulate = t[22].cast<bool>();
    in.reduce_cmd = static_cast<nrtsim::nki::ReduceCmd>(t[23].cast<int>());
    const auto pattern = t[24].cast<std::vector<int64_t>>();
    for (size_t i = 0; i < pattern.size() && i < nrtsim::nki::kMaxDims; ++i) in.pattern[i] = pattern[i];
    in.text = t[25].cast<std::string>();
    in.after = t[26].cast<std::vector<int32_t>>();
    // Runtime offsets: (operand, index view, stride, count, skip) each.
    for (py::handle o : t[27].cast<py::list>()) {
      const auto r = o.cast<py::tuple>();
      nrtsim::nki::RuntimeOffset off;
      off.operand = r[0].cast<int32_t>();
      off.index = view_from(r[1]);
      off.stride = r[2].cast<int64_t>();
      off.count = r[3].cast<int64_t>();
      off.skip = r[4].cast<bool>();
      in.offsets.push_back(off);
    }
    p.instructions.push_back(std::move(in));
  }
  return p;
}

std::vector<nrtsim::nki::External> externals_from(const py::list& memory) {
  std::vector<nrtsim::nki::External> out;
  for (py::handle h : memory) {
    const auto t = h.cast<py::tuple>();
    out.push_back({reinterpret_cast<uint8_t*>(t[0].cast<uintptr_t>()), t[1].cast<int64_t>()});
  }
  return out;
}

nrtsim::CoreSpec spec_named(const std::string& chip) {
  const std::string path = nrtsim::default_engine_model_path();
  const auto models = nrtsim::load_engine_model(path);
  auto it = models.find(chip);
  if (it == models.end()) throw py::value_error("NKI: no core model for chip '" + chip + "' in " + path);
  return it->second;
}

// Runtime errors (bad views, too little memory for an argument) reach Python as ValueError.
template <class Fn>
decltype(auto) checked(Fn&& fn) {
  try {
    return fn();
  } catch (const nrtsim::Error& e) {
    throw py::value_error(e.what());
  }
}

class PyExecutable {
 public:
  PyExecutable(const std::string& name, const py::list& buffers, const py::list& instructions)
      : exe_(std::make_shared<const Executable>(
            checked([&] { return Executable(program_from(name, buffers, instructions)); }))) {}

  // The modelled timing on `chip`: of the program as traced, or, given a run's device-loop
  // counts (run_host's second result), of that run. `links`: a capsule of the core's links
  // (nrtsim.CoreLinks, from a device), which price collective instructions; None for a kernel
  // without them.
  py::dict timeline(const std::string& chip, const py::object& links,
                    const py::object& loop_iterations) const {
    const nrtsim::CoreSpec spec = checked([&] { return spec_named(chip); });
    const nrtsim::CoreLinks* core_links = nullptr;
    if (!links.is_none()) {
      const auto c = links.cast<py::capsule>();
      if (std::string(c.name()) != nrtsim::nki::kCoreLinksCapsule) {
        throw py::type_error("timeline: links must be a capsule named nrtsim.CoreLinks");
      }
      core_links = static_cast<const nrtsim::CoreLinks*>(c.get_pointer());
    }
    nrtsim::nki::Timeline t =
        checked([&] { return nrtsim::nki::schedule(exe_->program(), spec, core_links); });
    if (!loop_iterations.is_none()) {
      const auto counts = loop_iterations.cast<std::vector<int64_t>>();
      t = checked([&] { return nrtsim::nki::with_iterations(t, counts); });
    }
    return nki_binding::timeline_dict(t, spec, true);
  }

  // Runs the kernel on host memory: (printed lines, per device loop the iterations its body ran).
  py::tuple run_host(const py::list& memory) const {
    const auto ext = externals_from(memory);
    std::vector<std::string> printed;
    std::vector<int64_t> iterations;
    {
      py::gil_scoped_release release;
      void* token = g_host.enter_run ? g_host.enter_run() : nullptr;
      try {
        printed = checked([&] { return exe_->run(ext, collectives(), &iterations); });
      } catch (...) {
        if (g_host.exit_run) g_host.exit_run(token);
        throw;
      }
      if (g_host.exit_run) g_host.exit_run(token);
    }
    return py::make_tuple(py::cast(printed), py::cast(iterations));
  }

  int64_t loop_count() const { return static_cast<int64_t>(exe_->loops().begins.size()); }

  // The executable for a device's launch (a capsule the device's binding opens).
  py::capsule capsule() const {
    auto* held = new std::shared_ptr<const Executable>(exe_);
    return py::capsule(held, nrtsim::nki::kExecutableCapsule, [](PyObject* o) {
      delete static_cast<std::shared_ptr<const Executable>*>(
          PyCapsule_GetPointer(o, nrtsim::nki::kExecutableCapsule));
    });
  }

  int64_t scratch_bytes() const { return exe_->scratch_bytes(); }
  int64_t instruction_count() const { return static_cast<int64_t>(exe_->program().instructions.size()); }

 private:
  std::shared_ptr<const Executable> exe_;
};

void set_host_kernels(const py::capsule& c) {
  if (std::string(c.name()) != nrtsim::nki::kHostKernelsCapsule) {
    throw py::type_error("set_host_kernels takes a capsule named nrtsim.nki.HostKernels");
  }
  g_host = *static_cast<const nrtsim::nki::HostKernels*>(c.get_pointer());
  nrtsim::nki::set_matmul_kernel(g_host.matmul);
}

}  // namespace

PYBIND11_MODULE(_nki, m) {
  m.doc() = "The nki package's binding to nrtsim's NKI interpreter (no torch).";
  py::class_<PyExecutable>(m, "Executable")
      .def(py::init<const std::string&, const py::list&, const py::list&>(), py::arg("name"),
           py::arg("buffers"), py::arg("instructions"))
      .def("timeline", &PyExecutable::timeline, py::arg("chip"), py::arg("links") = py::none(),
           py::arg("loop_iterations") = py::none())
      .def("run_host", &PyExecutable::run_host, py::arg("memory"))
      .def("capsule", &PyExecutable::capsule)
      .def_property_readonly("scratch_bytes", &PyExecutable::scratch_bytes)
      .def_property_readonly("loop_count", &PyExecutable::loop_count)
      .def_property_readonly("instruction_count", &PyExecutable::instruction_count);
  m.def("set_engine_model_path", &nrtsim::set_default_engine_model_path, py::arg("path"));
  // The tile geometry of `chip` in the engine model file (runtime/TensorTiles.h): the one place
  // the kernel checker's limits (partitions, PSUM banks, SBUF bytes, matmul sizes) come from.
  m.def("tensor_tiles", [](const std::string& chip) {
    try {
      return nki_binding::tiles_dict(nrtsim::tensor_tiles_of(chip.c_str()));
    } catch (const nrtsim::Error& e) {
      throw py::value_error(e.what());
    }
  }, py::arg("chip"));
  m.def("set_dma_model_path", &nrtsim::nki::set_default_dma_model_path, py::arg("path"));
  m.def("set_host_kernels", &set_host_kernels, py::arg("capsule"));
  m.def("set_collective_exchange", &set_collective_exchange, py::arg("exchange"));
  // The installed exchange for a device's launch (a capsule named nrtsim.nki.CollectiveHook;
  // None before nki.collectives installs one).
  m.def("collective_exchange", []() -> py::object {
    if (!g_collectives) return py::none();
    return py::capsule(static_cast<const void*>(&g_collectives),
                       nrtsim::nki::kCollectiveHookCapsule);
  });
  // The threads the interpreter splits a large instruction's partitions over
  // (runtime/nki/PartitionWorkers.h): NRTSIM_NKI_THREADS, else automatic (the CPUs, at most 4);
  // set_interpreter_threads(n) overrides it for the process (0: back to that) and returns the
  // count in effect before. split_instruction_count(): instructions run split so far;
  // worker_task_count(): partition ranges that worker threads ran.
  m.def("interpreter_threads", &nrtsim::nki::partition_threads);
  m.def("set_interpreter_threads", [](int n) {
    if (n < 0) {
      throw py::value_error("set_interpreter_threads: expected a count >= 0 (0: the configured "
                            "count), got " + std::to_string(n));
    }
    return nrtsim::nki::set_partition_threads(n);
  }, py::arg("threads"));
  m.def("split_instruction_count", &nrtsim::nki::split_instruction_count);
  m.def("worker_task_count", &nrtsim::nki::worker_task_count);
}
