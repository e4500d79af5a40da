#include "runtime/LinkModel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <set>
#include <vector>

#include "runtime/Env.h"
#include "runtime/Error.h"
#include "runtime/IniFile.h"

namespace nrtsim {

namespace {

[[noreturn]] void bad(const std::string& origin, int line, const std::string& what) {
  throw Error(ErrorCode::kConfiguration,
              "link model " + origin + (line > 0 ? ":" + std::to_string(line) : "") + ": " + what +
                  " (fix the file, or unset NRTSIM_LINK_MODEL to use the shipped one)");
}

// The keys of one section, each used once: a misspelt key must not silently keep a default.
class Reader {
 public:
  Reader(const IniSection& s, const std::string& origin) : s_(s), origin_(origin) {}

  std::string text(const std::string& key) {
    const IniValue* v = s_.find(key);
    if (v == nullptr) bad(origin_, s_.line, "section [" + s_.name + "] has no '" + key + "'");
    used_.insert(key);
    return v->text;
  }
  double number(const std::string& key) {
    const std::string value = text(key);
    const auto n = parse_non_negative(value);
    if (!n) bad(origin_, s_.find(key)->line, key + " = '" + value + "' is not a non-negative number");
    return *n;
  }
  double number_or(const std::string& key, double fallback) {
    return s_.find(key) != nullptr ? number(key) : fallback;
  }
  void check_all_used() const {
    for (const auto& [key, value] : s_.entries) {
      if (!used_.count(key)) bad(origin_, value.line, "unknown key '" + key + "' in [" + s_.name + "]");
    }
  }

 private:
  const IniSection& s_;
  const std::string& origin_;
  std::set<std::string> used_;
};

template <class Map>
const typename Map::mapped_type& find_named(const Map& map, const std::string& name,
                                            const char* what) {
  const auto it = map.find(name);
  if (it != map.end()) return it->second;
  std::string known;
  for (const auto& [key, value] : map) known += (known.empty() ? "" : ", ") + key;
  throw Error(ErrorCode::kConfiguration, std::string("the link model has no ") + what + " '" +
                                             name + "' (known: " + known + ")");
}

std::mutex g_path_mutex;
std::string g_default_path;

}  // namespace

const LinkSpec& LinkModel::link(const std::string& name) const {
  return find_named(links, name, "link");
}

const ChipLinks& LinkModel::chip(const std::string& name) const {
  return find_named(chips, name, "chip");
}

LinkModel parse_link_model(const std::string& text, const std::string& origin) {
  std::vector<IniSection> sections;
  try {
    // Comments are whole lines: values (sources) may contain '#' or ';'.
    sections = parse_ini(text);
  } catch (const IniError& e) {
    bad(origin, e.line(), e.what());
  }
  LinkModel model;
  for (const IniSection& section : sections) {
    const size_t dot = section.name.find('.');
    const std::string kind = section.name.substr(0, dot);
    const std::string name = dot == std::string::npos ? "" : section.name.substr(dot + 1);
    Reader r(section, origin);
    if (kind == "link" && !name.empty()) {
      LinkSpec l;
      l.name = name;
      l.gbytes_per_s = r.number("gbytes_per_s");
      l.hop_latency_us = r.number("hop_latency_us");
      l.mesh_below_mbytes = r.number_or("mesh_below_mbytes", 0);
      l.rdh_below_mbytes = r.number_or("rdh_below_mbytes", 0);
      l.one_shot_below_mbytes = r.number_or("one_shot_below_mbytes", 0);
      l.two_shot_below_mbytes = r.number_or("two_shot_below_mbytes", 0);
      l.multicast = r.number_or("multicast", 0) > 0;
      l.source = r.text("source");
      model.links[name] = l;
    } else if (kind == "chip" && !name.empty()) {
      ChipLinks c;
      c.chip = name;
      c.scale_up = r.text("scale_up");
      c.scale_out = r.text("scale_out");
      c.efa_gbits_per_s_per_chip = r.number("efa_gbits_per_s_per_chip");
      c.source = r.text("source");
      model.chips[name] = c;
    } else {
      bad(origin, section.line, "unknown section [" + section.name + "] (expected link.*, chip.*)");
    }
    r.check_all_used();
  }
  for (const auto& [name, c] : model.chips) {
    for (const auto& link : {c.scale_up, c.scale_out}) {
      if (!model.links.count(link)) bad(origin, 0, "chip " + name + " names unknown link '" + link + "'");
    }
  }
  return model;
}

LinkModel load_link_model(const std::string& path) {
  std::string text;
  try {
    text = read_ini_file(path);
  } catch (const IniError& e) {
    bad(path, 0, e.what());
  }
  return parse_link_model(text, path);
}

void set_default_link_model_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_path_mutex);
  g_default_path = path;
}

std::string default_link_model_path() {
  if (auto path = env::get("NRTSIM_LINK_MODEL")) return *path;
  std::lock_guard<std::mutex> lock(g_path_mutex);
  return g_default_path;
}

const char* collective_algorithm_name(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kRing: return "ring";
    case CollectiveAlgorithm::kMesh: return "mesh";
    case CollectiveAlgorithm::kRecursiveDoubling: return "rdh";
    case CollectiveAlgorithm::kDirect: return "direct";
  }
  return "ring";
}

CollectiveAlgorithm algorithm_for(const LinkSpec& link, double bytes) {
  const double mbytes = bytes / 1e6;
  if (mbytes < link.mesh_below_mbytes) return CollectiveAlgorithm::kMesh;
  if (mbytes < link.rdh_below_mbytes) return CollectiveAlgorithm::kRecursiveDoubling;
  return CollectiveAlgorithm::kRing;
}

double steps_per_pass(CollectiveAlgorithm algorithm, int members, int devices) {
  if (members <= 1) return 0;
  switch (algorithm) {
    // A mesh writes every chunk straight to its destination (routed through the torus): one
    // step between chips, one inside the chip.
    case CollectiveAlgorithm::kMesh: return 2;
    // One step inside the chip, log2(chips) between chips.
    case CollectiveAlgorithm::kRecursiveDoubling:
      return 1 + std::ceil(std::log2(static_cast<double>(std::max(devices, 1))));
    case CollectiveAlgorithm::kDirect: return 1;
    case CollectiveAlgorithm::kRing: return members - 1;
  }
  return members - 1;
}

CoreLinks::CoreLinks(const LinkModel& model, const std::string& chip, int cores_per_chip,
                     double hbm_bytes_per_ns)
    : cores_per_chip_(std::max(cores_per_chip, 1)), hbm_bytes_per_ns_(hbm_bytes_per_ns) {
  const ChipLinks& links = model.chip(chip);
  scale_up_ = model.link(links.scale_up);
  scale_out_ = model.link(links.scale_out);
  // GB/s is bytes per ns; the chip's links and NICs are shared by its cores, each running its own
  // rank of the collective at the same time.
  link_bytes_per_ns_ = scale_up_.gbytes_per_s / cores_per_chip_;
  efa_bytes_per_ns_ = links.efa_gbits_per_s_per_chip / 8 / cores_per_chip_;
}

double CoreLinks::collective_ns(const CollectiveTraffic& t) const {
  const int ranks = static_cast<int>(std::max<uint32_t>(t.ranks, 1));
  const int hosts = static_cast<int>(std::max<uint32_t>(t.hosts, 1));
  if (ranks * hosts <= 1 || !known()) return 0;
  double ns = 0;
  if (ranks > 1) {
    const int chips = (ranks + cores_per_chip_ - 1) / cores_per_chip_;
    const double hop_ns = scale_up_.hop_latency_us * 1e3;
    if (t.point_to_point) {
      ns += static_cast<double>(t.link_bytes) /
                (chips > 1 ? link_bytes_per_ns_ : hbm_bytes_per_ns_ / 2) + hop_ns;
    } else if (chips == 1) {
      // Inside one chip the data moves through HBM: each byte is read and written.
      ns += static_cast<double>(t.link_bytes) / (hbm_bytes_per_ns_ / 2) +
            t.passes * steps_per_pass(CollectiveAlgorithm::kRing, ranks, 1) * hop_ns;
    } else {
      const CollectiveAlgorithm algorithm =
          algorithm_for(scale_up_, static_cast<double>(t.buffer_bytes));
      ns += static_cast<double>(t.link_bytes) / link_bytes_per_ns_ +
            t.passes * steps_per_pass(algorithm, ranks, chips) * hop_ns;
    }
  }
  if (hosts > 1 && t.network_bytes > 0) {
    const double hop_ns = scale_out_.hop_latency_us * 1e3;
    const double steps = t.point_to_point ? 1 : t.passes * static_cast<double>(hosts - 1);
    ns += static_cast<double>(t.network_bytes) / efa_bytes_per_ns_ + steps * hop_ns;
  }
  return ns;
}

}  // namespace nrtsim
