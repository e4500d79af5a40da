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
      l.efficiency = r.number("efficiency");
      if (l.efficiency <= 0 || l.efficiency > 1) {
        bad(origin, section.find("efficiency")->line,
            "efficiency = " + section.find("efficiency")->text + " must be in (0, 1]");
      }
      l.kangaring = r.number_or("kangaring", 0) > 0;
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
    case CollectiveAlgorithm::kKangaRing: return "kangaring";
  }
  return "ring";
}

CollectiveAlgorithm algorithm_for(const LinkSpec& link, double bytes, bool whole_chips) {
  const double mbytes = bytes / 1e6;
  if (mbytes < link.mesh_below_mbytes) return CollectiveAlgorithm::kMesh;
  if (mbytes < link.rdh_below_mbytes) return CollectiveAlgorithm::kRecursiveDoubling;
  return link.kangaring && whole_chips ? CollectiveAlgorithm::kKangaRing : CollectiveAlgorithm::kRing;
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
    // A flat cycle of all members: O(N) hops ([CC-INTRA]). (The estimate once stepped along each
    // torus dimension instead, (c-1) + (x-1) + (y-1) hops, a hierarchical ring Neuron's runtime
    // does not describe; the published algorithm is kept.)
    case CollectiveAlgorithm::kRing: return members - 1;
    // One member of each pair of a chip's ranks is on the cycle: half the ring's hops, "O(N/2)".
    case CollectiveAlgorithm::kKangaRing: return std::max(1.0, std::ceil(members / 2.0) - 1);
  }
  return members - 1;
}

namespace {

const ChipLinks& chip_links(const LinkModel& model, const std::string& chip) { return model.chip(chip); }

}  // namespace

CoreLinks::CoreLinks(const LinkModel& model, const std::string& chip, int cores_per_chip,
                     double hbm_bytes_per_ns)
    : CoreLinks(model.link(chip_links(model, chip).scale_up),
                model.link(chip_links(model, chip).scale_out), /*switched=*/false, cores_per_chip,
                chip_links(model, chip).efa_gbits_per_s_per_chip, hbm_bytes_per_ns) {}

CoreLinks::CoreLinks(const LinkSpec& scale_up, const LinkSpec& scale_out, bool switched,
                     int ranks_per_device, double efa_gbits_per_s_per_device,
                     double hbm_bytes_per_ns)
    : scale_up_(scale_up),
      scale_out_(scale_out),
      switched_(switched),
      cores_per_chip_(std::max(ranks_per_device, 1)),
      hbm_bytes_per_ns_(hbm_bytes_per_ns) {
  // GB/s is bytes per ns; the chip's links and NICs are shared by its cores, each running its own
  // rank of the collective at the same time; transfers sustain the link's efficiency.
  link_bytes_per_ns_ = scale_up_.gbytes_per_s * scale_up_.efficiency / cores_per_chip_;
  efa_bytes_per_ns_ = efa_gbits_per_s_per_device / 8 * scale_out_.efficiency / cores_per_chip_;
}

double CoreLinks::torus_ns(const CollectiveTraffic& t, int ranks, std::string& used) const {
  // Members per chip: as stated (a strided group), else consecutive cores fill each chip.
  const int per_chip = t.ranks_per_chip > 0 ? std::min(static_cast<int>(t.ranks_per_chip), ranks)
                                            : std::min(ranks, cores_per_chip_);
  const int chips = (ranks + per_chip - 1) / per_chip;
  const double hop_ns = scale_up_.hop_latency_us * 1e3;
  const double bytes = static_cast<double>(t.link_bytes);
  // Inside one chip the data moves through HBM at the core's rate: each byte read and written.
  const double hbm = hbm_bytes_per_ns_ / 2;
  if (t.point_to_point) {
    used = chips > 1 ? scale_up_.name : "HBM (one chip)";
    return bytes / (chips > 1 ? link_bytes_per_ns_ : hbm) + hop_ns;
  }
  if (chips == 1) {
    used = "HBM (one chip)";
    return bytes / hbm + t.passes * steps_per_pass(CollectiveAlgorithm::kRing, ranks, 1) * hop_ns;
  }
  // Neuron's runtime picks the algorithm by size ([CC-INTRA]); an all-to-all is a mesh pattern
  // whatever its size.
  const bool whole_chips = per_chip == cores_per_chip_ && per_chip >= 2 && per_chip % 2 == 0;
  const CollectiveAlgorithm algorithm =
      t.all_to_all ? CollectiveAlgorithm::kMesh
                   : algorithm_for(scale_up_, static_cast<double>(t.buffer_bytes), whole_chips);
  used = scale_up_.name + " (" + collective_algorithm_name(algorithm) + ")";
  return bytes / link_bytes_per_ns_ + t.passes * steps_per_pass(algorithm, ranks, chips) * hop_ns;
}

double CoreLinks::switch_ns(const CollectiveTraffic& t, int ranks, std::string& used) const {
  used = scale_up_.name;
  const double bw = link_bytes_per_ns_;
  const double alpha = scale_up_.hop_latency_us * 1e3;
  const double buffer = static_cast<double>(t.buffer_bytes);
  const double mbytes = buffer / 1e6;
  const double share = static_cast<double>(ranks - 1) / ranks;
  const bool all_reduce = t.passes == 2;
  if (all_reduce && t.serving) {
    // A serving engine's custom all-reduce: one-shot reads every peer's whole buffer in one
    // step; two-shot reduce-scatters and all-gathers through peer memory in two.
    if (mbytes < scale_up_.one_shot_below_mbytes) {
      used += " (one-shot)";
      return (ranks - 1) * buffer / bw + alpha;
    }
    if (mbytes < scale_up_.two_shot_below_mbytes) {
      used += " (two-shot)";
      return 2 * share * buffer / bw + 2 * alpha;
    }
  }
  const double bytes = static_cast<double>(t.link_bytes);
  // Pairs talk directly through the switch, all at once.
  if (t.all_to_all || t.point_to_point) return bytes / bw + alpha;
  // NCCL: a ring of ranks - 1 steps per pass, or, where the switch reduces and multicasts (NVLink
  // SHARP), each byte sent once to the switch and received once; its tuner takes the faster.
  const double ring_ns = bytes / bw + t.passes * (ranks - 1) * alpha;
  if (scale_up_.multicast) {
    const double nvls_ns = all_reduce ? buffer / bw + 2 * alpha : share * buffer / bw + alpha;
    if (nvls_ns < ring_ns) {
      used += " (NVLS)";
      return nvls_ns;
    }
  }
  used += " (ring)";
  return ring_ns;
}

double CoreLinks::collective_ns(const CollectiveTraffic& t, std::string* over) const {
  const int ranks = static_cast<int>(std::max<uint32_t>(t.ranks, 1));
  const int hosts = static_cast<int>(std::max<uint32_t>(t.hosts, 1));
  if (ranks * hosts <= 1 || !known()) return 0;
  double ns = 0;
  std::string used;
  if (ranks > 1) ns += switched_ ? switch_ns(t, ranks, used) : torus_ns(t, ranks, used);
  if (hosts > 1 && t.network_bytes > 0) {
    // Between hosts: a ring of the hosts per pass (a message: one transfer).
    const double hop_ns = scale_out_.hop_latency_us * 1e3;
    const double steps = t.point_to_point ? 1 : t.passes * static_cast<double>(hosts - 1);
    ns += static_cast<double>(t.network_bytes) / efa_bytes_per_ns_ + steps * hop_ns;
    used += (used.empty() ? "" : " + ") + scale_out_.name;
  }
  if (over != nullptr) *over = used;
  return ns;
}

}  // namespace nrtsim
