// The Python front end (the `nki` package) traces a kernel into buffers and instructions; these
// bindings turn that into the runtime's Executable, run it on host memory (NumPy arrays, CPU
// tensors) or launch it on a neuron device: ONE launch record of kind kNkiKernel whose engine busy
// times and duration come from the kernel's instruction-level timeline.
#include "backend/nki/NkiBindings.h"

#include <torch/csrc/utils/pybind.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/nki/SingleThreaded.h"
#include "backend/core/KernelLaunch.h"
#include "backend/core/NeuronRuntime.h"
#include "runtime/EngineModel.h"
#include "runtime/Launch.h"
#include "runtime/nki/Interpreter.h"
#include "runtime/nki/Timeline.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

using nrtsim::nki::Executable;

// The interpreter's matmuls through ATen's CPU GEMM (BLAS): the same FP32 products and sums as
// the runtime's own loop, in BLAS's summation order, at BLAS speed.
void aten_matmul(int64_t m, int64_t n, int64_t k, const float* stationary, const float* moving,
                 float* out, bool accumulate) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor s = at::from_blob(const_cast<float*>(stationary), {k, m}, opts);
  const at::Tensor mv = at::from_blob(const_cast<float*>(moving), {k, n}, opts);
  at::Tensor o = at::from_blob(out, {m, n}, opts);
  if (accumulate) {
    o.addmm_(s.t(), mv);
  } else {
    at::mm_out(o, s.t(), mv);
  }
}

// The interpreter runs with ATen's intra-op threads set to one on this thread
// (torch_neuronx::SingleThreaded). Its GEMMs are tile-sized (at most 128 x 512 x 128): waking
// OpenMP workers for each costs more than it saves, and between them the idle workers spin on the
// cores the interpreter needs (measured: flash attention S=2048 took 3.6 s with two threads on a
// busy 2-core host, 0.14 s with one).

nrtsim::nki::View view_from(const py::handle& h) {
  nrtsim::nki::View v;
  if (h.is_none()) return v;
  const auto t = h.cast<py::tuple>();
  v.buffer = t[0].cast<int32_t>();
  v.offset = t[1].cast<int64_t>();
  const auto shape = t[2].cast<std::vector<int64_t>>();
  const auto stride = t[3].cast<std::vector<int64_t>>();
  TORCH_CHECK(shape.size() == stride.size() && shape.size() <= nrtsim::nki::kMaxDims,
              "NKI: a view has ", shape.size(), " dims; at most ", nrtsim::nki::kMaxDims);
  v.ndim = static_cast<int32_t>(shape.size());
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
    TORCH_CHECK(t.size() == 21, "NKI: an instruction has ", t.size(), " fields, expected 21");
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
    in.alu0 = static_cast<nrtsim::nki::Alu>(t[9].cast<int>());
    in.alu1 = static_cast<nrtsim::nki::Alu>(t[10].cast<int>());
    in.reverse0 = t[11].cast<bool>();
    in.reverse1 = t[12].cast<bool>();
    in.imm0 = t[13].cast<double>();
    in.imm1 = t[14].cast<double>();
    in.act = static_cast<nrtsim::nki::Act>(t[15].cast<int>());
    in.axes = t[16].cast<uint32_t>();
    in.negate = t[17].cast<bool>();
    in.accumulate = t[18].cast<bool>();
    const auto pattern = t[19].cast<std::vector<int64_t>>();
    for (size_t i = 0; i < pattern.size() && i < nrtsim::nki::kMaxDims; ++i) in.pattern[i] = pattern[i];
    in.text = t[20].cast<std::string>();
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
  const auto models = nrtsim::load_engine_model(nrtsim::default_engine_model_path());
  auto it = models.find(chip);
  TORCH_CHECK(it != models.end(), "NKI: no core model for chip '", chip, "' in ",
              nrtsim::default_engine_model_path());
  return it->second;
}

py::dict timeline_dict(const nrtsim::nki::Timeline& t, const nrtsim::CoreSpec& spec,
                       bool per_instruction) {
  py::dict busy, count, begin, end;
  for (nrtsim::Engine e : nrtsim::kAllEngines) {
    busy[nrtsim::engine_name(e)] = t.busy_ns[nrtsim::index_of(e)];
    count[nrtsim::engine_name(e)] = t.instruction_count[nrtsim::index_of(e)];
    begin[nrtsim::engine_name(e)] = t.engine_begin_ns[nrtsim::index_of(e)];
    end[nrtsim::engine_name(e)] = t.engine_end_ns[nrtsim::index_of(e)];
  }
  py::dict d;
  d["makespan_ns"] = t.makespan_ns;
  d["busy_ns"] = busy;
  d["instructions"] = count;
  d["engine_begin_ns"] = begin;
  d["engine_end_ns"] = end;
  d["matmul_flops"] = t.matmul_flops;
  d["dma_bytes"] = t.dma_bytes;
  // One physical core's BF16 peak: a multiply-accumulate is 2 FLOPs, GHz is cycles per ns.
  d["tensor_peak_flops_per_ns"] = 2.0 * spec.tensor_macs_per_cycle * spec.tensor_clock_ghz;
  if (per_instruction) {
    py::list times;
    for (const auto& it : t.instructions) times.append(py::make_tuple(it.start_ns, it.end_ns));
    d["instruction_times_ns"] = times;
  }
  return d;
}

// HBM bytes the kernel's DMAs read and write, for the launch record.
void add_dma_bytes(const nrtsim::nki::Program& p, nrtsim::Work& work) {
  for (const auto& in : p.instructions) {
    if (in.engine != nrtsim::Engine::kDma) continue;
    const auto& dst = p.buffers[static_cast<size_t>(in.dst.buffer)];
    const auto& src = p.buffers[static_cast<size_t>(in.a.buffer)];
    if (src.memory == nrtsim::nki::Memory::kHbm) {
      work[nrtsim::Engine::kDma].bytes_read +=
          static_cast<uint64_t>(in.a.numel()) * nrtsim::nki::dtype_size(src.dtype);
    }
    if (dst.memory == nrtsim::nki::Memory::kHbm) {
      work[nrtsim::Engine::kDma].bytes_written +=
          static_cast<uint64_t>(in.dst.numel()) * nrtsim::nki::dtype_size(dst.dtype);
    }
  }
}

class NkiExecutable {
 public:
  NkiExecutable(const std::string& name, const py::list& buffers, const py::list& instructions)
      : op_(nrtsim::intern("nki::" + name)),
        exe_(std::make_shared<Executable>(
            runtime_call([&] { return Executable(program_from(name, buffers, instructions)); }))) {}

  py::dict timeline(const std::string& chip) const {
    const nrtsim::CoreSpec spec = spec_named(chip);
    return timeline_dict(nrtsim::nki::schedule(exe_->program(), spec), spec, true);
  }

  // Standalone run on host memory (NumPy arrays, CPU tensors): no device, no launch record.
  py::list run_host(const py::list& memory) const {
    const auto ext = externals_from(memory);
    const SingleThreaded one_thread(true);
    std::vector<std::string> printed = runtime_call([&] { return exe_->run(ext); });
    return py::cast(printed);
  }

  // One launch of kind nki_kernel on neuron:<device>'s current stream.
  py::tuple launch(int device, const py::list& memory) const {
    const auto index = static_cast<c10::DeviceIndex>(device);
    check_device_index(index);
    const auto ext = externals_from(memory);
    const nrtsim::CoreSpec& spec = core(index).clock().model().spec();
    const nrtsim::nki::Timeline t = nrtsim::nki::schedule(exe_->program(), spec);
    nrtsim::Work work;
    work[nrtsim::Engine::kTensor].ops = t.matmul_flops;
    work.precision = nrtsim::Precision::kBf16;
    add_dma_bytes(exe_->program(), work);
    work.has_timeline = true;
    work.timeline_busy_ns = t.busy_ns;
    work.timeline_ns = t.makespan_ns;
    work.timeline_begin_ns = t.engine_begin_ns;
    work.timeline_end_ns = t.engine_end_ns;
    std::vector<std::string> printed;
    launch_on(index, op_, LaunchKind::kNkiKernel, work, [&] {
      const SingleThreaded one_thread(true);
      printed = exe_->run(ext);
    });
    return py::make_tuple(py::cast(printed), timeline_dict(t, spec, false));
  }

  int64_t scratch_bytes() const { return exe_->scratch_bytes(); }

 private:
  const char* op_;
  std::shared_ptr<Executable> exe_;
};

}  // namespace

void init_nki_bindings(py::module& m) {
  nrtsim::nki::set_matmul_kernel(&aten_matmul);
  py::class_<NkiExecutable>(m, "_NkiExecutable")
      .def(py::init<const std::string&, const py::list&, const py::list&>(), py::arg("name"),
           py::arg("buffers"), py::arg("instructions"))
      .def("timeline", &NkiExecutable::timeline, py::arg("chip"))
      .def("run_host", &NkiExecutable::run_host, py::arg("memory"))
      .def("launch", &NkiExecutable::launch, py::arg("device"), py::arg("memory"))
      .def_property_readonly("scratch_bytes", &NkiExecutable::scratch_bytes);
}

}  // namespace torch_neuronx
