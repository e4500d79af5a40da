#include "runtime/cost/CostData.h"

#include <cstdio>
#include <set>
#include <vector>

#include "runtime/Error.h"
#include "runtime/IniFile.h"

namespace nrtsim::cost {

namespace {

[[noreturn]] void bad(const std::string& origin, int line, const std::string& what) {
  throw Error(ErrorCode::kConfiguration,
              "estimate data " + origin + (line > 0 ? ":" + std::to_string(line) : "") + ": " +
                  what + " (fix the file, or unset TORCH_NEURONX_ESTIMATE_DATA to use the shipped one)");
}

class Reader {
 public:
  Reader(const IniSection& s, const std::string& origin) : s_(s), origin_(origin) {}

  std::string text(const std::string& key) const {
    const IniValue* v = s_.find(key);
    if (v == nullptr) bad(origin_, s_.line, "section [" + s_.name + "] has no '" + key + "'");
    used_.insert(key);
    return v->text;
  }
  std::string text_or(const std::string& key, const std::string& fallback) const {
    return s_.find(key) != nullptr ? text(key) : fallback;
  }
  // Keys added after the first release are optional, so an edited copy of an older file loads.
  double number_or(const std::string& key, double fallback) const {
    return s_.find(key) != nullptr ? number(key) : fallback;
  }
  double number(const std::string& key) const {
    const std::string value = text(key);
    const auto n = parse_non_negative(value);
    if (!n) bad(origin_, line_of(key), key + " = '" + value + "' is not a non-negative number");
    return *n;
  }
  // Every key was understood: a misspelt key must not silently keep a default.
  void check_all_used() const {
    for (const auto& [key, value] : s_.entries) {
      if (!used_.count(key)) bad(origin_, value.line, "unknown key '" + key + "' in [" + s_.name + "]");
    }
  }
  int line_of(const std::string& key) const { return s_.find(key)->line; }
  bool has(const std::string& key) const { return s_.find(key) != nullptr; }
  const std::string& section() const { return s_.name; }
  const std::string& origin() const { return origin_; }

 private:
  const IniSection& s_;
  const std::string& origin_;
  mutable std::set<std::string> used_;
};

Efficiency read_efficiency(const Reader& r) {
  Efficiency e;
  e.tensor = r.number("tensor");
  e.hbm = r.number("hbm");
  // A link's sustained fraction is the link model's, beside its bandwidth: the simulated clock
  // and the projection price a collective with one figure.
  for (const std::string key : {"link", "link_source"}) {
    if (r.has(key)) {
      bad(r.origin(), r.line_of(key),
          "'" + key + "' in [" + r.section() + "]: a link's efficiency is the link model's "
          "('efficiency' in the [link.*] sections of torch_neuronx/data/neuron_links.ini, or the "
          "file NRTSIM_LINK_MODEL names); remove it here");
    }
  }
  e.op_latency_us = r.number_or("op_latency_us", 0);
  e.op_latency_source = r.text_or("op_latency_source", "");
  e.instruction_overhead_cycles = r.number_or("instruction_overhead_cycles", 0);
  e.host_step_us = r.number_or("host_step_us", 0);
  e.host_step_source = r.text_or("host_step_source", "");
  e.tp_backward_overlap = r.number_or("tp_backward_overlap", 1) > 0;
  r.text_or("tp_backward_overlap_source", "");
  e.tensor_source = r.text_or("tensor_source", "");
  e.hbm_source = r.text_or("hbm_source", "");
  return e;
}

}  // namespace

CostData parse_cost_data(const std::string& text, const std::string& origin,
                         const nrtsim::LinkModel& links) {
  std::vector<IniSection> sections;
  try {
    // Comments are whole lines: values (sources) may contain '#' or ';'.
    sections = parse_ini(text);
  } catch (const IniError& e) {
    bad(origin, e.line(), e.what());
  }

  CostData data;
  data.links = links.links;
  bool have_trainium = false, have_gpu = false;
  for (const auto& s : sections) {
    const Reader r(s, origin);
    const auto dot = s.name.find('.');
    const std::string kind = s.name.substr(0, dot);
    const std::string key = dot == std::string::npos ? "" : s.name.substr(dot + 1);
    if (s.name == "efficiency.trainium") {
      data.trainium = read_efficiency(r);
      have_trainium = true;
    } else if (s.name == "efficiency.gpu") {
      data.gpu = read_efficiency(r);
      have_gpu = true;
    } else if (kind == "gpu" && !key.empty()) {
      GpuSpec g;
      g.key = key;
      g.name = r.text("name");
      g.bf16_tflops = r.number("bf16_tflops");
      g.fp8_tflops = r.number("fp8_tflops");
      g.tf32_tflops = r.number("tf32_tflops");
      g.vector_tflops = r.number("vector_tflops");
      g.hbm_gbytes = r.number("hbm_gbytes");
      g.hbm_gbytes_per_s = r.number("hbm_gbytes_per_s");
      g.kernel_launch_us = r.number("kernel_launch_us");
      g.source = r.text("source");
      if (g.bf16_tflops <= 0 || g.hbm_gbytes_per_s <= 0) {
        bad(origin, s.line, "[" + s.name + "] needs positive bf16_tflops and hbm_gbytes_per_s");
      }
      data.gpus[key] = g;
    } else if (kind == "link") {
      bad(origin, s.line, "[" + s.name + "]: links are the link model's (torch_neuronx/data/"
                          "neuron_links.ini, or the file NRTSIM_LINK_MODEL names); move it there");
    } else if (kind == "instance" && !key.empty()) {
      InstanceSpec i;
      i.name = key;
      i.accelerator = r.text("accelerator");
      i.devices = static_cast<int>(r.number("devices"));
      if (i.devices < 1) bad(origin, r.line_of("devices"), "devices must be at least 1");
      const std::string topology = r.text("topology");
      if (topology.rfind("torus ", 0) == 0) {
        i.torus = true;
        if (std::sscanf(topology.c_str() + 6, "%dx%d", &i.torus_x, &i.torus_y) != 2 ||
            i.torus_x * i.torus_y != i.devices) {
          bad(origin, r.line_of("topology"),
              "topology '" + topology + "' must be 'torus AxB' with A*B = devices, or 'switch'");
        }
      } else if (topology != "switch") {
        bad(origin, r.line_of("topology"), "topology '" + topology + "' must be 'torus AxB' or 'switch'");
      }
      if (const auto chip = links.chips.find(i.accelerator); chip != links.chips.end()) {
        // A Trainium generation's links are the link model's, stated once there.
        for (const char* k : {"scale_up", "scale_out", "efa_gbits_per_s"}) {
          if (s.find(k) != nullptr) {
            bad(origin, r.line_of(k), std::string(k) + " of a " + i.accelerator +
                                          " instance comes from the link model ([chip." +
                                          i.accelerator + "] of neuron_links.ini); remove it here");
          }
        }
        i.scale_up = chip->second.scale_up;
        i.scale_out = chip->second.scale_out;
        i.efa_gbits_per_s = chip->second.efa_gbits_per_s_per_chip * i.devices;
      } else {
        i.scale_up = r.text("scale_up");
        i.scale_out = r.text("scale_out");
        i.efa_gbits_per_s = r.number("efa_gbits_per_s");
      }
      i.price_usd_per_hour = r.number("price_usd_per_hour");
      i.price_source = r.text("price_source");
      data.instances[key] = i;
    } else {
      bad(origin, s.line, "unknown section [" + s.name +
                              "] (expected efficiency.trainium, efficiency.gpu, gpu.*, instance.*)");
    }
    r.check_all_used();
  }
  if (!have_trainium || !have_gpu) bad(origin, 0, "needs [efficiency.trainium] and [efficiency.gpu]");
  for (const auto& [name, i] : data.instances) {
    for (const auto& link : {i.scale_up, i.scale_out}) {
      if (!data.links.count(link)) bad(origin, 0, "instance " + name + " names unknown link '" + link + "'");
    }
    if (!i.torus && !data.gpus.count(i.accelerator)) {
      bad(origin, 0, "instance " + name + " (switch topology) names unknown GPU '" + i.accelerator + "'");
    }
  }
  return data;
}

CostData load_cost_data(const std::string& path) {
  std::string text;
  try {
    text = read_ini_file(path);
  } catch (const IniError& e) {
    bad(path, 0, e.what());
  }
  const std::string links = default_link_model_path();
  if (links.empty()) {
    throw Error(ErrorCode::kConfiguration,
                "no link model file: set NRTSIM_LINK_MODEL to a file like "
                "torch_neuronx/data/neuron_links.ini (importing torch_neuronx sets it)");
  }
  return parse_cost_data(text, path, load_link_model(links));
}

namespace {
template <class Map>
const typename Map::mapped_type& find_named(const Map& map, const std::string& name, const char* what) {
  auto it = map.find(name);
  if (it != map.end()) return it->second;
  std::string known;
  for (const auto& [k, v] : map) known += (known.empty() ? "" : ", ") + k;
  throw Error(ErrorCode::kConfiguration,
              std::string("unknown ") + what + " '" + name + "'; the estimate data knows: " + known);
}
}  // namespace

const InstanceSpec& CostData::instance(const std::string& name) const {
  return find_named(instances, name, "instance");
}
const GpuSpec& CostData::gpu_spec(const std::string& key) const {
  return find_named(gpus, key, "GPU");
}
const LinkSpec& CostData::link(const std::string& name) const {
  return find_named(links, name, "link");
}

}  // namespace nrtsim::cost
