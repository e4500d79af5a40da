#include "backend/python/OpWorkBindings.h"

#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

#include "backend/core/BoxedArgs.h"
#include "backend/core/OpWork.h"
#include "runtime/ProgramFusion.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

c10::OperatorHandle handle_of(const py::object& func) {
  const py::object schema = func.attr("_schema");
  const c10::OperatorName name(schema.attr("name").cast<std::string>(),
                               schema.attr("overload_name").cast<std::string>());
  const auto handle = c10::Dispatcher::singleton().findSchema(name);
  TORCH_CHECK(handle.has_value(), "op work: no operator ", name.name, ".", name.overload_name,
              " in the dispatcher");
  return *handle;
}

// The work of one call: {"engines": {engine: (ops, bytes_read, bytes_written)}, "precision",
// "kind", "source", "tensor_tile_ops"}. `inside_program`: as an op of a compiled program
// (runtime/ProgramFusion.h).
py::dict op_work_of(const py::object& func, const py::tuple& args, const py::dict& kwargs,
                    const std::vector<at::Tensor>& outputs, bool inside_program) {
  const c10::OperatorHandle op = handle_of(func);
  py::kwargs kw;
  for (auto item : kwargs) kw[item.first] = item.second;
  const torch::jit::Stack stack = torch::jit::createStackForSchema(
      op.schema(), torch::jit::tuple_slice(args), kw, std::nullopt);
  const OpWork w =
      op_work(op, KernelArgs(stack.data(), stack.size()), outputs, default_tensor_tiles());
  const nrtsim::Work work = inside_program ? nrtsim::work_inside_program(w.work, w.kind) : w.work;
  py::dict engines;
  for (nrtsim::Engine e : nrtsim::kAllEngines) {
    const nrtsim::EngineWork& ew = work[e];
    engines[nrtsim::engine_name(e)] = py::make_tuple(ew.ops, ew.bytes_read, ew.bytes_written);
  }
  py::dict d;
  d["engines"] = engines;
  d["precision"] = nrtsim::precision_name(work.precision);
  d["kind"] = nrtsim::launch_kind_name(w.kind);
  d["source"] = work_source_name(w.source);
  d["tensor_tile_ops"] = w.tensor_tile_ops;
  return d;
}

}  // namespace

void init_op_work_bindings(py::module& m) {
  m.def("_op_work", &op_work_of, py::arg("func"), py::arg("args"), py::arg("kwargs"),
        py::arg("outputs"), py::arg("inside_program") = false);
}

}  // namespace torch_neuronx
