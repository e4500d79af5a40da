#include "backend/estimate/EstimateBindings.h"

#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <string>
#include <vector>

#include "backend/estimate/TracedWork.h"
#include "runtime/EngineModel.h"
#include "runtime/Error.h"
#include "runtime/cost/Collectives.h"
#include "runtime/cost/CostData.h"
#include "runtime/cost/LayerSplit.h"
#include "runtime/cost/Projection.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

using namespace nrtsim::cost;

CollectiveKind collective_kind(const std::string& name) {
  if (name == "all_reduce") return CollectiveKind::kAllReduce;
  if (name == "all_gather") return CollectiveKind::kAllGather;
  if (name == "reduce_scatter") return CollectiveKind::kReduceScatter;
  if (name == "all_to_all") return CollectiveKind::kAllToAll;
  throw py::value_error("unknown collective '" + name +
                        "' (all_reduce, all_gather, reduce_scatter, all_to_all)");
}

// The ops of one traced rank, in order.
class OpTrace {
 public:
  OpTrace() = default;
  explicit OpTrace(std::vector<TracedOp> ops) : ops_(std::move(ops)) {}

  // Derives the op's work from its arguments and outputs; returns how ("family", "kernel",
  // "copy", "none" for a view or allocation, or "default" for an op neuron has no model of).
  // `weight_bytes`: the bytes of its arguments that are model weights.
  std::string record(const py::object& func, const py::tuple& args, const py::dict& kwargs,
                     const std::vector<at::Tensor>& outputs, const std::string& phase,
                     uint64_t weight_bytes, bool sequence_parallel) {
    const py::object schema = func.attr("_schema");
    const c10::OperatorName name(schema.attr("name").cast<std::string>(),
                                 schema.attr("overload_name").cast<std::string>());
    const auto handle = c10::Dispatcher::singleton().findSchema(name);
    TORCH_CHECK(handle.has_value(), "estimate: no operator ", name.name, ".",
                name.overload_name, " in the dispatcher");
    py::kwargs kw;
    for (auto item : kwargs) kw[item.first] = item.second;
    const torch::jit::Stack stack =
        torch::jit::createStackForSchema(handle->schema(), torch::jit::tuple_slice(args), kw, std::nullopt);
    estimate::TracedWork w = estimate::traced_work(*handle, stack, outputs);
    w.op.phase = phase;
    w.op.weight_bytes_read = weight_bytes;
    w.op.sequence_parallel = sequence_parallel;
    ops_.push_back(std::move(w.op));
    return work_source_name(w.source);
  }

  // A collective the model's parallel plan implies at this point of the step.
  void record_collective(const std::string& kind, const std::string& group, double bytes,
                         const std::string& phase, const std::string& where) {
    TracedOp op;
    op.op = where;
    op.phase = phase;
    op.kind = nrtsim::LaunchKind::kCollective;
    op.collective = collective_kind(kind);
    op.group = group;
    op.collective_bytes = bytes;
    ops_.push_back(std::move(op));
  }

  size_t size() const { return ops_.size(); }
  const std::vector<TracedOp>& ops() const { return ops_; }

  py::list rows() const {
    py::list out;
    for (const auto& op : ops_) {
      py::dict d;
      d["op"] = op.op;
      d["phase"] = op.phase;
      d["count"] = op.count;
      d["precision"] = nrtsim::precision_name(op.work.precision);
      d["bytes"] = op.work.bytes_read() + op.work.bytes_written();
      py::dict engine_bytes;
      for (nrtsim::Engine e : nrtsim::kAllEngines) {
        engine_bytes[nrtsim::engine_name(e)] =
            py::make_tuple(op.work[e].bytes_read, op.work[e].bytes_written);
      }
      d["engine_bytes"] = engine_bytes;  // per engine: (read, written)
      py::dict engines;
      for (nrtsim::Engine e : nrtsim::kAllEngines) engines[nrtsim::engine_name(e)] = op.work[e].ops;
      d["ops"] = engines;
      d["tensor_tile_ops"] = op.tensor_tile_ops;
      d["weight_bytes"] = op.weight_bytes_read;
      d["sequence_parallel"] = op.sequence_parallel;
      if (op.kind == nrtsim::LaunchKind::kCollective) {
        d["collective"] = collective_kind_name(op.collective);
        d["group"] = op.group;
        d["collective_bytes"] = op.collective_bytes;
      }
      out.append(d);
    }
    return out;
  }

 private:
  std::vector<TracedOp> ops_;
};

py::tuple split(const OpTrace& short_trace, const OpTrace& long_trace) {
  try {
    LayerSplit s = split_layers(short_trace.ops(), long_trace.ops());
    return py::make_tuple(OpTrace(std::move(s.outside)), OpTrace(std::move(s.period)));
  } catch (const nrtsim::Error& e) {
    throw py::value_error(e.what());
  }
}

OpTrace combined(const std::vector<std::tuple<const OpTrace*, double, bool>>& parts) {
  std::vector<TracePart> list;
  for (const auto& [trace, count, in_layer] : parts) list.push_back({&trace->ops(), count, in_layer});
  return OpTrace(combine(list));
}

template <class T>
T get(const py::dict& d, const char* key, T fallback) {
  return d.contains(key) ? d[key].cast<T>() : fallback;
}

py::dict engines_dict(const std::array<double, nrtsim::kEngineCount>& ns) {
  py::dict d;
  for (nrtsim::Engine e : nrtsim::kAllEngines) {
    d[nrtsim::engine_name(e)] = ns[nrtsim::index_of(e)] * 1e-9;  // seconds, as every *_s field
  }
  return d;
}

py::dict to_dict(const Projection& p) {
  py::dict d;
  d["instance"] = p.instance;
  d["accelerator"] = p.accelerator;
  d["gpu"] = p.gpu;
  d["ranks"] = p.ranks;
  d["ranks_per_instance"] = p.ranks_per_instance;
  d["instances"] = p.instances;
  d["step_s"] = p.step_ns * 1e-9;
  d["tokens_per_step"] = p.tokens_per_step;
  d["tokens_per_s"] = p.tokens_per_s;
  d["useful_flops_per_step"] = p.useful_flops_per_step;
  d["peak_flops_per_rank"] = p.peak_flops_per_rank_ns * 1e9;
  d["mfu"] = p.mfu;
  d["price_usd_per_hour"] = p.price_usd_per_hour;
  d["price_source"] = p.price_source;
  d["usd_per_million_tokens"] = p.usd_per_million_tokens > 0 ? py::object(py::float_(p.usd_per_million_tokens)) : py::none();
  d["hbm_bytes_per_rank"] = p.hbm_bytes_per_rank;
  d["hbm_capacity_per_rank"] = p.hbm_capacity_per_rank;
  d["pipeline_bubble_s"] = p.pipeline_bubble_ns * 1e-9;
  d["tokens_per_sequence_step"] = p.tokens_per_sequence_step;
  py::list parts;
  for (const auto& part : p.parts) parts.append(py::make_tuple(part.name, part.ns * 1e-9));
  d["parts"] = parts;
  py::list memory;
  for (const auto& m : p.memory) memory.append(py::make_tuple(m.name, m.bytes));
  d["memory"] = memory;
  d["bound"] = p.bound;
  d["engine_s"] = engines_dict(p.engine_ns);
  py::list phases;
  for (const auto& ph : p.phases) {
    py::dict x;
    x["phase"] = ph.phase;
    x["s"] = ph.ns * 1e-9;
    x["compute_s"] = ph.compute_ns * 1e-9;
    x["launch_s"] = ph.fixed_ns * 1e-9;
    x["collective_s"] = ph.collective_ns * 1e-9;
    x["engine_s"] = engines_dict(ph.engine_ns);
    x["bound"] = ph.bound;
    phases.append(x);
  }
  d["phases"] = phases;
  py::list ops;
  for (const auto& o : p.ops) {
    py::dict x;
    x["op"] = o.op;
    x["phase"] = o.phase;
    x["count"] = o.count;
    x["s"] = o.ns * 1e-9;
    x["engine_s"] = engines_dict(o.engine_ns);
    x["flops"] = o.flops;
    x["bytes"] = o.bytes;
    ops.append(x);
  }
  d["ops"] = ops;
  py::list collectives;
  for (const auto& c : p.collectives) {
    py::dict x;
    x["name"] = c.name;
    x["over"] = c.over;
    x["ranks"] = c.ranks;
    x["bytes"] = c.bytes;
    x["count"] = c.count;
    x["s_each"] = c.ns_each * 1e-9;
    x["exposed_s"] = c.exposed_ns * 1e-9;
    collectives.append(x);
  }
  d["collectives"] = collectives;
  return d;
}

py::dict project_trace(const OpTrace& trace, const py::dict& facts_d, const py::dict& layout_d,
                       const py::dict& workload_d, const std::string& instance,
                       const std::string& data_path, const std::string& engine_model_path) {
  try {
    const CostData data = load_cost_data(data_path);
    const auto chips = nrtsim::load_engine_model(engine_model_path);
    ModelFacts facts;
    facts.layers = get<int>(facts_d, "layers", 0);
    facts.hidden = get<int>(facts_d, "hidden", 0);
    facts.params = get<double>(facts_d, "params", 0);
    facts.params_per_rank = get<double>(facts_d, "params_per_rank", 0);
    facts.weight_bytes = get<double>(facts_d, "weight_bytes", 2);
    facts.optimizer_bytes = get<double>(facts_d, "optimizer_bytes", 12);
    facts.gradient_bytes = get<double>(facts_d, "gradient_bytes", 2);
    facts.activation_bytes = get<int>(facts_d, "activation_bytes", 2);
    facts.activation_bytes_per_rank = get<double>(facts_d, "activation_bytes_per_rank", 0);
    facts.selective_activation_bytes_per_rank =
        get<double>(facts_d, "selective_activation_bytes_per_rank", facts.activation_bytes_per_rank);
    facts.layer_input_bytes_per_rank = get<double>(facts_d, "layer_input_bytes_per_rank", 0);
    facts.layer_activation_bytes = get<double>(facts_d, "layer_activation_bytes", 0);
    facts.kv_cache_bytes_per_rank = get<double>(facts_d, "kv_cache_bytes_per_rank", 0);
    facts.draft_params_per_rank = get<double>(facts_d, "draft_params_per_rank", 0);
    facts.draft_kv_cache_bytes_per_rank = get<double>(facts_d, "draft_kv_cache_bytes_per_rank", 0);
    facts.kv_width = get<double>(facts_d, "kv_width", 0);
    Layout layout;
    layout.tp = get<int>(layout_d, "tp", 1);
    layout.cp = get<int>(layout_d, "cp", 1);
    layout.pp = get<int>(layout_d, "pp", 1);
    layout.dp = get<int>(layout_d, "dp", 1);
    layout.ep = get<int>(layout_d, "ep", 1);
    layout.adp = get<int>(layout_d, "adp", 1);
    layout.fsdp = get<bool>(layout_d, "fsdp", false);
    layout.zero1 = get<bool>(layout_d, "zero1", false);
    const std::string recompute = get<std::string>(layout_d, "recompute", "none");
    if (recompute == "none") {
      layout.recompute = Recompute::kNone;
    } else if (recompute == "selective") {
      layout.recompute = Recompute::kSelective;
    } else if (recompute == "full") {
      layout.recompute = Recompute::kFull;
    } else {
      throw py::value_error("recompute='" + recompute + "': use none, selective or full");
    }
    layout.microbatches = get<int>(layout_d, "microbatches", 1);
    Workload workload;
    const std::string phase = get<std::string>(workload_d, "phase", "train");
    if (phase == "train") {
      workload.phase = Phase::kTrain;
    } else if (phase == "prefill") {
      workload.phase = Phase::kPrefill;
    } else if (phase == "decode") {
      workload.phase = Phase::kDecode;
    } else {
      throw py::value_error("phase='" + phase + "': use train, prefill or decode");
    }
    workload.tokens_per_microbatch = get<double>(workload_d, "tokens_per_microbatch", 0);
    workload.compiled = get<bool>(workload_d, "compiled", true);
    workload.fp8 = get<bool>(workload_d, "fp8", false);
    workload.weight_scale = get<double>(workload_d, "weight_scale", 1);
    workload.kv_scale = get<double>(workload_d, "kv_scale", 1);
    workload.async_host = get<bool>(workload_d, "async_host", true);
    workload.speculation = get<int>(workload_d, "speculation", 0);
    workload.acceptance = get<double>(workload_d, "acceptance", 0);
    workload.fused_speculation = get<bool>(workload_d, "fused_speculation", true);
    workload.draft_tp = get<int>(workload_d, "draft_tp", 1);
    return to_dict(project(trace.ops(), facts, layout, workload, data.instance(instance), data, chips));
  } catch (const nrtsim::Error& e) {
    throw py::value_error(e.what());
  }
}

py::dict instances(const std::string& data_path, const std::string& engine_model_path) {
  try {
    const CostData data = load_cost_data(data_path);
    const auto chips = nrtsim::load_engine_model(engine_model_path);
    py::dict out;
    for (const auto& [name, i] : data.instances) {
      const RankModel rank(i, data, chips);
      py::dict d;
      d["accelerator"] = i.accelerator;
      d["devices"] = i.devices;
      d["gpu"] = i.is_gpu();
      d["scale_up"] = i.scale_up;
      d["scale_out"] = i.scale_out;
      d["price_usd_per_hour"] = i.price_usd_per_hour;
      d["price_source"] = i.price_source;
      d["ranks"] = i.devices * rank.ranks_per_device();
      d["hbm_bytes_per_rank"] = rank.hbm_capacity_bytes();
      d["host_step_us"] = rank.efficiency().host_step_us;
      d["host_step_source"] = rank.efficiency().host_step_source;
      out[py::str(name)] = d;
    }
    return out;
  } catch (const nrtsim::Error& e) {
    throw py::value_error(e.what());
  }
}

// The estimate's price of one collective of `ranks` members `stride` ranks apart on `instance`
// (cost/Collectives.h): on the links alone, as the simulated clock charges a process group's
// collective beyond its launch's fixed cost, and inside a projected program (plus its dependent
// step). For the guard tests that hold the two paths to one price.
py::dict collective_price(const std::string& kind, double bytes, int ranks, int stride,
                          const std::string& instance, const std::string& data_path,
                          const std::string& engine_model_path) {
  try {
    const CostData data = load_cost_data(data_path);
    const auto chips = nrtsim::load_engine_model(engine_model_path);
    const InstanceSpec& spec = data.instance(instance);
    const RankModel rank(spec, data, chips);
    const CollectiveKind k = collective_kind(kind);
    py::dict d;
    std::string over;
    d["link_s"] = collective_link_ns(k, bytes, ranks, stride, spec, data, rank, &over) * 1e-9;
    d["s"] = collective_ns(k, bytes, ranks, stride, spec, data, rank) * 1e-9;
    d["over"] = over;
    d["ranks_per_instance"] = spec.devices * rank.ranks_per_device();
    return d;
  } catch (const nrtsim::Error& e) {
    throw py::value_error(e.what());
  }
}

}  // namespace

void init_estimate_bindings(py::module& m) {
  py::class_<OpTrace>(m, "_EstimateTrace")
      .def(py::init<>())
      .def("record", &OpTrace::record, py::arg("func"), py::arg("args"), py::arg("kwargs"),
           py::arg("outputs"), py::arg("phase"), py::arg("weight_bytes") = 0,
           py::arg("sequence_parallel") = false)
      .def("record_collective", &OpTrace::record_collective, py::arg("kind"), py::arg("group"),
           py::arg("bytes"), py::arg("phase"), py::arg("where"))
      .def("__len__", &OpTrace::size)
      .def("rows", &OpTrace::rows);
  m.def("_estimate_split_layers", &split, py::arg("short_trace"), py::arg("long_trace"));
  m.def("_estimate_combine", &combined, py::arg("parts"));
  m.def("_estimate_project", &project_trace, py::arg("trace"), py::arg("facts"),
        py::arg("layout"), py::arg("workload"), py::arg("instance"), py::arg("data_path"),
        py::arg("engine_model_path"));
  m.def("_estimate_collective", &collective_price, py::arg("kind"), py::arg("bytes"),
        py::arg("ranks"), py::arg("stride"), py::arg("instance"), py::arg("data_path"),
        py::arg("engine_model_path"));
  m.def("_estimate_instances", &instances, py::arg("data_path"), py::arg("engine_model_path"));
  m.def("_estimate_matmul_tile_ops", &estimate::matmul_tile_ops, py::arg("batch"), py::arg("m"),
        py::arg("k"), py::arg("n"));
}

}  // namespace torch_neuronx
