// torch_neuronx._C: the few entry points the Python layer needs. Everything on the hot path is
// reached through the dispatcher and c10 interfaces; these bindings are for the device module,
// op tracking and reports.
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

#include "backend/core/CachingAllocator.h"
#include "backend/core/Generator.h"
#include "backend/core/HostAllocator.h"
#include "backend/core/HostMathKernel.h"
#include "backend/core/NeuronRuntime.h"
#include "backend/core/NeuronStream.h"
#include "backend/core/OpTracking.h"
#include "runtime/KernelLaunch.h"

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

  // The runtime's count, not device_count(): that is capped at 127 for PyTorch's int8 interfaces.
  m.def("_device_count", [] { return nrtsim::Runtime::visible_device_count(); });
  m.def("_configuration_error", [] { return nrtsim::Runtime::configuration_error(); });
  m.def("_is_initialized", [] { return nrtsim::Runtime::is_initialized(); });
  m.def("_in_bad_fork", [] { return nrtsim::Runtime::in_forked_child(); });
  m.def("_init", &init_runtime);
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int device) { set_device(static_cast<c10::DeviceIndex>(device)); });
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
    for (const auto& row : nrtsim::ExecutionTrace::global().snapshot()) {
      py::dict d;
      d["op"] = row.op;
      d["engine"] = nrtsim::engine_name(row.engine);
      d["launches"] = row.launches;
      d["flops"] = row.flops;
      d["bytes"] = row.bytes;
      d["host_ns"] = row.host_nanoseconds;
      rows.append(d);
    }
    return rows;
  });
}
