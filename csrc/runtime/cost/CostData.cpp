#include "runtime/cost/CostData.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "runtime/Error.h"

namespace nrtsim::cost {

namespace {

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

[[noreturn]] void bad(const std::string& origin, int line, const std::string& what) {
  throw Error(ErrorCode::kConfiguration,
              "estimate data " + origin + (line > 0 ? ":" + std::to_string(line) : "") + ": " +
                  what + " (fix the file, or unset TORCH_NEURONX_ESTIMATE_DATA to use the shipped one)");
}

// One [section] of the file: its keys, values and where each key was.
struct Section {
  std::string name;
  int line = 0;
  std::map<std::string, std::pair<std::string, int>> values;
};

class Reader {
 public:
  Reader(const Section& s, const std::string& origin) : s_(s), origin_(origin) {}

  std::string text(const std::string& key) const {
    auto it = s_.values.find(key);
    if (it == s_.values.end()) bad(origin_, s_.line, "section [" + s_.name + "] has no '" + key + "'");
    used_.insert(key);
    return it->second.first;
  }
  std::string text_or(const std::string& key, const std::string& fallback) const {
    return s_.values.count(key) ? text(key) : fallback;
  }
  double number(const std::string& key) const {
    const std::string value = text(key);
    char* end = nullptr;
    const double n = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(n >= 0)) {
      bad(origin_, s_.values.at(key).second, key + " = '" + value + "' is not a non-negative number");
    }
    return n;
  }
  // Every key was understood: a misspelt key must not silently keep a default.
  void check_all_used() const {
    for (const auto& [key, value] : s_.values) {
      if (!used_.count(key)) bad(origin_, value.second, "unknown key '" + key + "' in [" + s_.name + "]");
    }
  }
  int line_of(const std::string& key) const { return s_.values.at(key).second; }

 private:
  const Section& s_;
  const std::string& origin_;
  mutable std::set<std::string> used_;
};

Efficiency read_efficiency(const Reader& r) {
  Efficiency e;
  e.tensor = r.number("tensor");
  e.hbm = r.number("hbm");
  e.link = r.number("link");
  e.tensor_source = r.text_or("tensor_source", "");
  e.hbm_source = r.text_or("hbm_source", "");
  e.link_source = r.text_or("link_source", "");
  return e;
}

}  // namespace

CostData parse_cost_data(const std::string& text, const std::string& origin) {
  std::vector<Section> sections;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string stripped = trim(raw);
    // Comments are whole lines: values (sources) may contain '#' or ';'.
    if (stripped.empty() || stripped.front() == '#' || stripped.front() == ';') continue;
    if (stripped.front() == '[') {
      if (stripped.back() != ']') bad(origin, line_no, "unclosed section header '" + stripped + "'");
      Section s;
      s.name = trim(stripped.substr(1, stripped.size() - 2));
      s.line = line_no;
      for (const auto& other : sections) {
        if (other.name == s.name) bad(origin, line_no, "section [" + s.name + "] appears twice");
      }
      sections.push_back(s);
      continue;
    }
    const auto eq = stripped.find('=');
    if (eq == std::string::npos) bad(origin, line_no, "expected 'key = value', got '" + stripped + "'");
    if (sections.empty()) bad(origin, line_no, "'" + stripped + "' comes before any [section]");
    const std::string key = trim(stripped.substr(0, eq));
    if (sections.back().values.count(key)) bad(origin, line_no, "key '" + key + "' appears twice");
    sections.back().values[key] = {trim(stripped.substr(eq + 1)), line_no};
  }

  CostData data;
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
    } else if (kind == "link" && !key.empty()) {
      LinkSpec l;
      l.name = key;
      l.gbytes_per_s = r.number("gbytes_per_s");
      l.hop_latency_us = r.number("hop_latency_us");
      l.source = r.text("source");
      data.links[key] = l;
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
      i.scale_up = r.text("scale_up");
      i.scale_out = r.text("scale_out");
      i.efa_gbits_per_s = r.number("efa_gbits_per_s");
      i.price_usd_per_hour = r.number("price_usd_per_hour");
      i.price_source = r.text("price_source");
      data.instances[key] = i;
    } else {
      bad(origin, s.line, "unknown section [" + s.name +
                              "] (expected efficiency.trainium, efficiency.gpu, gpu.*, link.*, instance.*)");
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
  std::ifstream file(path);
  if (!file) bad(path, 0, "cannot be read");
  std::stringstream text;
  text << file.rdbuf();
  return parse_cost_data(text.str(), path);
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
