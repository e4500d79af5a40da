// torch_neuronx._C: the few entry points the Python layer needs. Everything on the hot path is
// reached through the dispatcher and c10 interfaces; these bindings are for the device module,
// op tracking and reports.
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

#include "backend/compiler/ProgramLaunch.h"
#include "backend/distributed/Bindings.h"
#include "backend/estimate/EstimateBindings.h"
#include "backend/nki/NkiBindings.h"
#include "backend/python/OpWorkBindings.h"
#include "backend/core/CachingAllocator.h"
#include "backend/core/Generator.h"
#include "backend/core/HostAllocator.h"
#include "backend/core/BoxedHostMath.h"
#include "backend/core/NeuronRuntime.h"
#include "backend/core/NeuronStream.h"
#include "backend/core/OpTracking.h"
#include "backend/core/VmlDispatch.h"
#include "nki/TilesDict.h"
#include "runtime/EngineModel.h"
#include "runtime/Event.h"
#include "runtime/LaunchObserver.h"
#include "runtime/LaunchTotals.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

py::dict core_properties(const nrtsim::Topology& topology, const nrtsim::LogicalCore& core) {
  py::dict d;
  d["name"] = topology.instance().name;
  d["chip"] = topology.instance().chip.name;
  d["total_memory"] = core.hbm_capacity;
  d["logical_core_id"] = core.logical_id;
  d["chip_index"] = core.chip;
  d["physical_cores"] = core.physical_cores;
  d["logical_nc_config"] = topology.lnc();
  return d;
}

void init_runtime() {
  runtime();
  // Marks the device as needing re-initialisation in a forked child, so that PyTorch's lazy-init
  // path reaches torch.neuron._lazy_init there, which refuses with a message naming 'spawn'.
  torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
}

}  // namespace
}  // namespace torch_neuronx

PYBIND11_MODULE(_C, m) {
  using namespace torch_neuronx;
  m.doc() = "torch_neuronx native extension: PyTorch integration over the nrtsim runtime";
  // Before any kernel can run multithreaded: oneMKL's first-call race (VmlDispatch.cpp).
  resolve_vml_dispatch();

  m.def("_device_count", [] { return static_cast<int>(device_count()); });
  m.def("_configuration_error", [] { return nrtsim::Runtime::configuration_error(); });
  m.def("_is_initialized", [] { return nrtsim::Runtime::is_initialized(); });
  m.def("_in_bad_fork", [] { return nrtsim::Runtime::in_forked_child(); });
  m.def("_init", &init_runtime);
  init_compiler_bindings(m);
  distributed::init_distributed_bindings(m);
  init_estimate_bindings(m);
  init_nki_bindings(m);
  init_op_work_bindings(m);
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int device) { set_device(static_cast<c10::DeviceIndex>(device)); });
  m.def("_single_core_alias", [] { return single_core_alias(); });
  m.def("_synchronize", [](int device) {
    if (device < 0) {
      runtime().synchronize();
    } else {
      core(static_cast<c10::DeviceIndex>(device)).synchronize();
    }
  });
  m.def("_device_properties", [](int device) {
    check_device_index(static_cast<c10::DeviceIndex>(device));
    const nrtsim::Topology& topology = runtime().topology();
    return core_properties(topology, topology.core(device));
  });
  m.def("_topology", [] {
    const nrtsim::Topology& topology = runtime().topology();
    py::dict d;
    d["instance"] = topology.instance().name;
    d["chip"] = topology.instance().chip.name;
    d["chips"] = topology.instance().chips;
    d["physical_cores_per_chip"] = topology.instance().chip.physical_cores;
    d["logical_nc_config"] = topology.lnc();
    d["logical_cores_on_instance"] = topology.logical_cores_on_instance();
    d["visible_logical_cores"] = [&] {
      std::vector<int> ids;
      for (const auto& c : topology.cores()) ids.push_back(c.logical_id);
      return ids;
    }();
    d["description"] = topology.describe();
    return d;
  });
  m.def("_hbm_info", [](int device) {
    nrtsim::NeuronCore& c = core(static_cast<c10::DeviceIndex>(device));
    return py::make_tuple(c.hbm().free_bytes(), c.hbm().capacity(), c.hbm().used());
  });
  // Pinned-host allocator statistics under CUDA's host_memory_stats() keys.
  m.def("_host_memory_stats", [] {
    const at::HostStats stats = host_allocator().get_stats();
    py::dict d;
    auto add = [&](const char* name, const c10::CachingAllocator::Stat& stat) {
      const std::string prefix(name);
      d[py::str(prefix + ".current")] = stat.current;
      d[py::str(prefix + ".peak")] = stat.peak;
      d[py::str(prefix + ".allocated")] = stat.allocated;
      d[py::str(prefix + ".freed")] = stat.freed;
    };
    add("allocations", stats.allocations);
    add("allocated_bytes", stats.allocated_bytes);
    add("active_requests", stats.active_requests);
    add("active_bytes", stats.active_bytes);
    d["num_host_alloc"] = stats.num_host_alloc;
    d["num_host_free"] = stats.num_host_free;
    return d;
  });
  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(device))));
  });
  // torch.neuron.Event.elapsed_time: torch.Event's own method rejects subclass instances as the
  // end event, so neuron events are timed here, on the c10::Event both objects wrap.
  m.def("_event_elapsed_time", [](py::handle start, py::handle end) {
    TORCH_CHECK(THPEvent_Check(start.ptr()) && THPEvent_Check(end.ptr()),
                "elapsed_time: expected two torch.Event objects, got ",
                Py_TYPE(start.ptr())->tp_name, " and ", Py_TYPE(end.ptr())->tp_name);
    const c10::Event& start_event = reinterpret_cast<THPEvent*>(start.ptr())->event;
    const c10::Event& end_event = reinterpret_cast<THPEvent*>(end.ptr())->event;
    return start_event.elapsedTime(end_event);
  });
  // Host wall time between two recorded neuron events (elapsed_time gives modelled device time).
  m.def("_event_host_elapsed_time", [](py::handle start, py::handle end) {
    TORCH_CHECK(THPEvent_Check(start.ptr()) && THPEvent_Check(end.ptr()),
                "host_elapsed_time: expected two torch.Event objects");
    const c10::Event& s = reinterpret_cast<THPEvent*>(start.ptr())->event;
    const c10::Event& e = reinterpret_cast<THPEvent*>(end.ptr())->event;
    TORCH_CHECK(s.eventId() != nullptr && e.eventId() != nullptr,
                "host_elapsed_time: both events must be recorded first");
    return runtime_call([&] {
      return static_cast<nrtsim::Event*>(s.eventId())
          ->host_elapsed_ms(*static_cast<nrtsim::Event*>(e.eventId()));
    });
  });
  m.def("_stream_priority", [](int device, int64_t stream_id) {
    return stream_priority(c10::Stream(c10::Stream::UNSAFE,
                                       c10::Device(c10::DeviceType::PrivateUse1,
                                                   static_cast<c10::DeviceIndex>(device)),
                                       stream_id));
  });
  m.def("_get_fallback_ops", &fallback_ops);
  m.def("_unregistered_native_ops", [] { return unregistered_names(); });
  m.def("_get_executed_ops", &executed_ops);
  m.def("_clear_op_tracking", &clear_op_tracking);
  m.def("_kernel_trace", [] {
    py::list rows;
    for (const auto& row : kernel_totals().snapshot()) {
      py::dict d;
      d["op"] = row.op;
      d["kind"] = nrtsim::launch_kind_name(row.kind);
      d["engine"] = nrtsim::engine_name(row.engine);
      d["launches"] = row.launches;
      py::dict ops;
      for (nrtsim::Engine e : nrtsim::kAllEngines) ops[nrtsim::engine_name(e)] = row.ops[nrtsim::index_of(e)];
      d["ops"] = ops;
      d["flops"] = row.ops[nrtsim::index_of(nrtsim::Engine::kTensor)];
      d["bytes_read"] = row.bytes_read;
      d["bytes_written"] = row.bytes_written;
      d["bytes"] = row.bytes_read + row.bytes_written;
      py::dict engine_bytes;
      for (nrtsim::Engine e : nrtsim::kAllEngines) {
        const size_t i = nrtsim::index_of(e);
        engine_bytes[nrtsim::engine_name(e)] =
            py::make_tuple(row.engine_bytes_read[i], row.engine_bytes_written[i]);
      }
      d["engine_bytes"] = engine_bytes;  // per engine: (read, written)
      d["host_ns"] = row.host_ns;
      d["sim_ns"] = row.sim_ns;
      rows.append(d);
    }
    return rows;
  });
  m.def("_clear_kernel_trace", [] { kernel_totals().clear(); });
  // How many launch observers are registered (tests check that profilers leave none behind).
  m.def("_observer_count", [] {
    return nrtsim::detail::g_observer_count.load(std::memory_order_acquire);
  });
  m.def("_set_engine_model_path", [](const std::string& path) {
    nrtsim::set_default_engine_model_path(path);
  });
  m.def("_engine_model_path", &nrtsim::default_engine_model_path);
  m.def("_set_link_model_path", [](const std::string& path) {
    nrtsim::set_default_link_model_path(path);
  });
  m.def("_link_model_path", &nrtsim::default_link_model_path);
  // The links a device's clock prices collectives with (runtime/LinkModel.h), per logical core.
  m.def("_core_links", [](int device) {
    const nrtsim::CoreLinks& links = core(static_cast<c10::DeviceIndex>(device)).clock().links();
    py::dict d;
    d["scale_up"] = links.scale_up().name;
    d["scale_out"] = links.scale_out().name;
    d["link_bytes_per_ns"] = links.link_bytes_per_ns();
    d["efa_bytes_per_ns"] = links.efa_bytes_per_ns();
    d["hop_latency_ns"] = links.scale_up().hop_latency_us * 1e3;
    d["efa_hop_latency_ns"] = links.scale_out().hop_latency_us * 1e3;
    d["mesh_below_bytes"] = links.scale_up().mesh_below_mbytes * 1e6;
    d["rdh_below_bytes"] = links.scale_up().rdh_below_mbytes * 1e6;
    d["cores_per_chip"] = links.cores_per_chip();
    return d;
  });
  // The simulated clock of a device: where it stands and how long each engine has been busy.
  m.def("_simulated_time", [](int device) {
    nrtsim::NeuronCore& c = core(static_cast<c10::DeviceIndex>(device));
    py::dict busy;
    const auto totals = c.clock().busy_totals_ns();
    for (nrtsim::Engine e : nrtsim::kAllEngines) busy[nrtsim::engine_name(e)] = totals[nrtsim::index_of(e)];
    py::dict d;
    d["now_ns"] = c.clock().now_ns();
    d["busy_ns"] = busy;
    return d;
  });
  // The core model a device's clock uses (rates per logical core), for reports and tests.
  m.def("_core_model", [](int device) {
    const nrtsim::CoreModel& model = core(static_cast<c10::DeviceIndex>(device)).clock().model();
    py::dict d;
    d["neuroncore"] = model.spec().neuroncore;
    d["lnc"] = model.lnc();
    d["tensor_flops_per_ns"] = py::dict(
        py::arg("fp32") = model.tensor_flops_per_ns(nrtsim::Precision::kFp32),
        py::arg("bf16") = model.tensor_flops_per_ns(nrtsim::Precision::kBf16),
        py::arg("fp8") = model.tensor_flops_per_ns(nrtsim::Precision::kFp8));
    py::dict elements;
    for (nrtsim::Engine e : {nrtsim::Engine::kVector, nrtsim::Engine::kScalar, nrtsim::Engine::kGpSimd}) {
      elements[nrtsim::engine_name(e)] = py::dict(
          py::arg("fp32") = model.elements_per_ns(e, nrtsim::Precision::kFp32),
          py::arg("bf16") = model.elements_per_ns(e, nrtsim::Precision::kBf16));
    }
    d["elements_per_ns"] = elements;
    d["hbm_bytes_per_ns"] = model.hbm_bytes_per_ns();
    d["host_link_bytes_per_ns"] = model.host_link_bytes_per_ns();
    d["kernel_launch_ns"] = model.fixed_cost_ns(nrtsim::LaunchKind::kKernel);
    d["copy_launch_ns"] = model.fixed_cost_ns(nrtsim::LaunchKind::kCopyHostToDevice);
    // The tile geometry of one physical core (runtime/TensorTiles.h), as nki reads it.
    d["tiles"] = nki_binding::tiles_dict(model.tiles());
    return d;
  });
}
