// torch_neuronx._C's part of NKI: the neuron device's launch of a kernel the nki package has
// specialised (nki._nki.Executable, handed over as a capsule) — ONE launch record of kind
// kNkiKernel whose engine busy times and duration come from the kernel's instruction-level
// timeline — and ATen's GEMM lent to the nki package's host runs. The nki package never imports
// torch_neuronx; torch_neuronx registers itself with nki (torch_neuronx/nki_op.py).
#include "backend/nki/NkiBindings.h"

#include <torch/csrc/utils/pybind.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/core/KernelLaunch.h"
#include "backend/core/NeuronRuntime.h"
#include "backend/nki/SingleThreaded.h"
#include "nki/HostKernels.h"
#include "nki/TimelineDict.h"
#include "runtime/EngineModel.h"
#include "runtime/Launch.h"
#include "runtime/nki/DmaModel.h"
#include "runtime/nki/Interpreter.h"
#include "runtime/nki/Timeline.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

using nrtsim::nki::Executable;

// The interpreter's matmuls through ATen's CPU GEMM (BLAS): the same FP32 products and sums as
// the runtime's own loop, in BLAS's summation order, at BLAS speed.
void aten_matmul(int64_t m, int64_t n, int64_t k, const float* stationary, int64_t srows,
                 const float* moving, int64_t mrows, float* out, bool accumulate) {
  // A thread outside the run's SingleThreaded scope is one of the interpreter's partition
  // workers (torch did not start it): its thread-local OpenMP and MKL counts are still their
  // defaults, and BLAS would start a team of threads inside the interpreter's own split
  // (measured: conv1d's process CPU time 8.9 -> 31 ms per call with two threads). Set to one,
  // once per thread.
  if (!SingleThreaded::active()) {
    thread_local const bool single = (at::set_num_threads(1), true);
    (void)single;
  }
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor s = at::from_blob(const_cast<float*>(stationary), {k, m}, {srows, 1}, opts);
  const at::Tensor mv = at::from_blob(const_cast<float*>(moving), {k, n}, {mrows, 1}, opts);
  at::Tensor o = at::from_blob(out, {m, n}, opts);
  if (accumulate) {
    o.addmm_(s.t(), mv);
  } else {
    at::mm_out(o, s.t(), mv);
  }
}

// A kernel run holds ATen's intra-op threads at one (SingleThreaded): its GEMMs are tile-sized
// (at most 128 x 512 x 128), and waking OpenMP workers for each costs more than it saves; between
// them idle workers spin on the cores the interpreter needs (measured: flash attention S=2048 took
// 3.6 s with two threads on a busy 2-core host, 0.14 s with one).
void* enter_run() { return new SingleThreaded(true); }
void exit_run(void* token) { delete static_cast<SingleThreaded*>(token); }

const nrtsim::nki::HostKernels kHostKernels{&aten_matmul, &enter_run, &exit_run};

std::shared_ptr<const Executable> executable_of(const py::capsule& c) {
  TORCH_CHECK(std::string(c.name()) == nrtsim::nki::kExecutableCapsule,
              "NKI: expected an nki._nki.Executable capsule");
  return *static_cast<std::shared_ptr<const Executable>*>(c.get_pointer());
}

std::vector<nrtsim::nki::External> externals_from(const py::list& memory) {
  std::vector<nrtsim::nki::External> out;
  for (py::handle h : memory) {
    const auto t = h.cast<py::tuple>();
    out.push_back({reinterpret_cast<uint8_t*>(t[0].cast<uintptr_t>()), t[1].cast<int64_t>()});
  }
  return out;
}

nrtsim::nki::DType view_dtype(const nrtsim::nki::Program& p, const nrtsim::nki::View& v) {
  return v.dtype >= 0 ? static_cast<nrtsim::nki::DType>(v.dtype)
                      : p.buffers[static_cast<size_t>(v.buffer)].dtype;
}

// HBM bytes the kernel's DMAs read and write, for the launch record: an instruction in a device
// loop's body counts as many times as that loop's body ran (`iterations`, per loop; empty: once).
void add_dma_bytes(const nrtsim::nki::Program& p, nrtsim::Work& work,
                   const nrtsim::nki::LoopNest& nest, const std::vector<int64_t>& iterations) {
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const auto& in = p.instructions[i];
    if (in.engine != nrtsim::Engine::kDma || !in.a.valid()) continue;
    const int32_t loop = nest.empty() ? -1 : nest.innermost[i];
    const uint64_t times =
        loop >= 0 && !iterations.empty() ? static_cast<uint64_t>(iterations[static_cast<size_t>(loop)]) : 1;
    const auto& dst = p.buffers[static_cast<size_t>(in.dst.buffer)];
    const auto& src = p.buffers[static_cast<size_t>(in.a.buffer)];
    // An indirect DMA's indexed view spans every row an index may name; the rows it moves are
    // as many as the other side's elements.
    const bool indirect = in.op == nrtsim::nki::Opcode::kDmaIndirect;
    const int64_t moved = (in.axes & 1u) != 0 ? in.a.numel() : in.dst.numel();
    if (src.memory == nrtsim::nki::Memory::kHbm) {
      work[nrtsim::Engine::kDma].bytes_read +=
          times * static_cast<uint64_t>(indirect ? moved : in.a.numel()) *
          nrtsim::nki::dtype_size(view_dtype(p, in.a));
    }
    if (dst.memory == nrtsim::nki::Memory::kHbm) {
      work[nrtsim::Engine::kDma].bytes_written +=
          times * static_cast<uint64_t>(indirect ? moved : in.dst.numel()) *
          nrtsim::nki::dtype_size(view_dtype(p, in.dst));
    }
  }
}

// One launch of kind nki_kernel on neuron:<device>'s current stream.
// `exchange`: nki's collective exchange (a capsule from nki._nki.collective_exchange()) for a
// kernel with nki.collectives; None otherwise.
py::tuple launch(const py::capsule& capsule, int device, const py::list& memory,
                 const py::object& exchange) {
  const nrtsim::nki::CollectiveHook* collectives = nullptr;
  if (!exchange.is_none()) {
    const auto c = exchange.cast<py::capsule>();
    TORCH_CHECK(std::string(c.name()) == nrtsim::nki::kCollectiveHookCapsule,
                "NKI: expected an nki._nki.collective_exchange() capsule");
    collectives = static_cast<const nrtsim::nki::CollectiveHook*>(c.get_pointer());
  }
  const std::shared_ptr<const Executable> exe = executable_of(capsule);
  const auto index = static_cast<c10::DeviceIndex>(device);
  check_device_index(index);
  const auto ext = externals_from(memory);
  const nrtsim::CoreSpec& spec = core(index).clock().model().spec();
  nrtsim::nki::Timeline t =
      runtime_call([&] {
        return nrtsim::nki::schedule(exe->program(), spec, &core(index).clock().links());
      });
  nrtsim::Work work;
  auto charge = [&] {
    work[nrtsim::Engine::kTensor].ops = t.matmul_flops;
    work.precision = nrtsim::Precision::kBf16;
    work.has_timeline = true;
    work.timeline_busy_ns = t.busy_ns;
    work.timeline_ns = t.makespan_ns;
    work.timeline_begin_ns = t.engine_begin_ns;
    work.timeline_end_ns = t.engine_end_ns;
  };
  charge();
  std::vector<std::string> printed;
  // The launch reads `work` after its body: a kernel with device loops is charged for the
  // iterations this run made (DeviceLoops.h).
  launch_on(index, nrtsim::intern("nki::" + exe->program().name), LaunchKind::kNkiKernel, work,
            [&] {
              const SingleThreaded one_thread(true);
              std::vector<int64_t> iterations;
              printed = exe->run(ext, collectives, &iterations);
              if (!iterations.empty()) {
                t = nrtsim::nki::with_iterations(t, iterations);
                charge();
              }
              add_dma_bytes(exe->program(), work, exe->loops(), iterations);
            });
  return py::make_tuple(py::cast(printed), nki_binding::timeline_dict(t, spec, false));
}

}  // namespace

void init_nki_bindings(py::module& m) {
  nrtsim::nki::set_matmul_kernel(&aten_matmul);
  m.def("_nki_set_dma_model_path", &nrtsim::nki::set_default_dma_model_path, py::arg("path"));
  m.def("_nki_launch", &launch, py::arg("executable"), py::arg("device"), py::arg("memory"),
        py::arg("exchange") = py::none());
  // neuron:<device>'s links (a capsule named nrtsim.CoreLinks) for timing a kernel's
  // collectives on the host (nki.simulate).
  m.def("_nki_core_links", [](int device) {
    const auto index = static_cast<c10::DeviceIndex>(device);
    check_device_index(index);
    auto* links = new nrtsim::CoreLinks(core(index).clock().links());
    return py::capsule(static_cast<const void*>(links), nrtsim::nki::kCoreLinksCapsule,
                       [](PyObject* o) {
                         delete static_cast<const nrtsim::CoreLinks*>(
                             PyCapsule_GetPointer(o, nrtsim::nki::kCoreLinksCapsule));
                       });
  }, py::arg("device"));
  m.def("_nki_host_kernels", [] {
    return py::capsule(const_cast<nrtsim::nki::HostKernels*>(&kHostKernels),
                       nrtsim::nki::kHostKernelsCapsule);
  });
}

}  // namespace torch_neuronx
