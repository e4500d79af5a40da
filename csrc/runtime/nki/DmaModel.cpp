#include "runtime/nki/DmaModel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "runtime/Env.h"
#include "runtime/Error.h"
#include "runtime/IniFile.h"

namespace nrtsim::nki {
namespace {

std::mutex g_mutex;
std::string g_path;
std::map<std::string, std::map<std::string, DmaSpec>> g_loaded;  // path -> specs

[[noreturn]] void config_error(const std::string& origin, int line, const std::string& what) {
  throw Error(ErrorCode::kConfiguration,
              "NKI DMA model " + origin + (line ? ":" + std::to_string(line) : "") + ": " + what);
}

// Dims of a view after merging neighbours that are contiguous in memory; dim 0 of an on-chip
// view (the partition) never merges with the free dims: each partition is its own row.
struct Dims {
  std::vector<int64_t> shape, stride;
};

Dims merged(const View& v, bool on_chip) {
  Dims d;
  size_t fixed = 0;  // leading entries that never merge (the partition dim on chip)
  int first = 0;
  if (on_chip && v.ndim > 0) {
    first = 1;
    if (v.shape[0] != 1) {
      d.shape.push_back(v.shape[0]);
      d.stride.push_back(v.stride[0]);
      fixed = 1;
    }
  }
  for (int i = first; i < v.ndim; ++i) {
    if (v.shape[i] == 1) continue;
    if (d.shape.size() > fixed && d.stride.back() == v.stride[i] * v.shape[i]) {
      d.shape.back() *= v.shape[i];
      d.stride.back() = v.stride[i];
    } else {
      d.shape.push_back(v.shape[i]);
      d.stride.push_back(v.stride[i]);
    }
  }
  return d;
}

// Elements per contiguous run of a view: its innermost merged dim if that is unit-stride.
int64_t run_elements(const View& v, bool on_chip) {
  const Dims d = merged(v, on_chip);
  if (d.shape.empty()) return 1;
  return d.stride.back() == 1 ? d.shape.back() : 1;
}

}  // namespace

std::map<std::string, DmaSpec> parse_dma_model(const std::string& text, const std::string& origin) {
  std::vector<IniSection> sections;
  try {
    sections = parse_ini(text, IniSyntax{/*inline_comments=*/true});
  } catch (const IniError& e) {
    config_error(origin, e.line(), e.what());
  }
  std::map<std::string, DmaSpec> out;
  for (const IniSection& s : sections) {
    DmaSpec spec;
    auto number = [&](const char* key, double& into) {
      const IniValue* v = s.find(key);
      if (v == nullptr) config_error(origin, s.line, "section [" + s.name + "] lacks " + key);
      const auto x = parse_non_negative(v->text);
      if (!x) config_error(origin, v->line, std::string(key) + " = '" + v->text + "' is not a number");
      into = *x;
    };
    double engines = 0;
    number("engines", engines);
    spec.engines = static_cast<int>(engines);
    number("engine_bytes_per_ns", spec.engine_bytes_per_ns);
    number("transfer_fixed_ns", spec.transfer_fixed_ns);
    number("descriptor_ns", spec.descriptor_ns);
    number("max_descriptor_bytes", spec.max_descriptor_bytes);
    number("latency_ns", spec.latency_ns);
    number("transpose_efficiency_2byte", spec.transpose_efficiency_2byte);
    number("transpose_efficiency_4byte", spec.transpose_efficiency_4byte);
    if (spec.engines < 1 || spec.engine_bytes_per_ns <= 0 || spec.max_descriptor_bytes <= 0) {
      config_error(origin, s.line, "[" + s.name + "] needs engines >= 1 and positive rates");
    }
    out[s.name] = spec;
  }
  return out;
}

void set_default_dma_model_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_path = path;
}

const DmaSpec& dma_spec(const std::string& neuroncore) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string path = g_path;
  if (auto env = env::get("NRTSIM_DMA_MODEL")) path = *env;
  if (path.empty()) {
    throw Error(ErrorCode::kConfiguration,
                "NKI DMA model: no data file set (the nki package sets nki/data/dma.ini at "
                "import; NRTSIM_DMA_MODEL names another)");
  }
  auto it = g_loaded.find(path);
  if (it == g_loaded.end()) {
    std::string text;
    try {
      text = read_ini_file(path);
    } catch (const IniError& e) {
      config_error(path, 0, e.what());
    }
    it = g_loaded.emplace(path, parse_dma_model(text, path)).first;
  }
  auto spec = it->second.find(neuroncore);
  if (spec == it->second.end()) config_error(path, 0, "no section [" + neuroncore + "]");
  return spec->second;
}

DmaShape dma_shape(const Program& p, const Instruction& in, const DmaSpec& spec) {
  auto dtype_of = [&](const View& v) {
    return v.dtype >= 0 ? static_cast<DType>(v.dtype) : p.buffers[static_cast<size_t>(v.buffer)].dtype;
  };
  auto on_chip = [&](const View& v) {
    return p.buffers[static_cast<size_t>(v.buffer)].memory != Memory::kHbm;
  };
  DmaShape s;
  // An indirect DMA moves one row per index: its indexed side is timed as one such row (the
  // rows the indices pick are apart in memory, each its own descriptor at least), its other
  // side as the tile it is.
  const bool indirect = in.op == Opcode::kDmaIndirect;
  const bool scatter_rows = indirect && (in.axes & 1u) != 0;
  // An indirect dma_transpose (a gather, axes bit 2): each row its indices pick is read whole,
  // and the engine's transpose block reorders the rows, as in a dma_transpose; its dst is a
  // permuted view of the SBUF tile, so the run is the gathered row's, not the view's.
  const bool gathered_transpose = indirect && !scatter_rows && (in.axes & 4u) != 0;
  s.transpose = (!indirect && (in.axes & 1u) != 0) || gathered_transpose;
  auto row_of = [](View v) {
    v.shape[0] = 1;
    return v;
  };
  const View dst = scatter_rows ? row_of(in.dst) : in.dst;
  const View src = indirect && !scatter_rows ? row_of(in.a) : in.a;
  s.element_bytes = dtype_size(dtype_of(dst));
  int64_t run = gathered_transpose ? run_elements(src, on_chip(src)) : run_elements(dst, on_chip(dst));
  // A DMA transpose writes contiguous rows (the engine's transpose block reorders them); a
  // plain copy moves runs that are contiguous on both sides.
  if (src.valid() && !s.transpose) {
    s.element_bytes = std::max(s.element_bytes, dtype_size(dtype_of(src)));
    const int64_t src_run = run_elements(src, on_chip(src));
    // The common run: both sides contiguous for min(run, src_run) elements when one divides
    // the other (row layouts); otherwise element by element.
    const int64_t lo = std::min(run, src_run), hi = std::max(run, src_run);
    run = (lo > 0 && hi % lo == 0) ? lo : 1;
  }
  const int64_t total = scatter_rows ? in.a.numel() : in.dst.numel();
  const double run_bytes = static_cast<double>(run) * static_cast<double>(s.element_bytes);
  const auto pieces = static_cast<int64_t>(std::max(1.0, std::ceil(run_bytes / spec.max_descriptor_bytes)));
  s.descriptors = (run > 0 ? (total + run - 1) / run : 0) * pieces;
  if (indirect && (in.axes & 8u) != 0) {
    // dma_compute's read-modify-write through an index tile: the indirect rows and the tile
    // they are summed with, two descriptor streams as a two-source dma_compute reads.
    s.descriptors *= 2;
  } else if (in.op == Opcode::kDmaCompute) {
    // dma_compute reads each of its sources as a copy would (the sum rides along): as many
    // descriptor streams as sources.
    int64_t sources = 0;
    for (const View* v : {&in.a, &in.b, &in.c, &in.d, &in.e, &in.f}) sources += v->valid() ? 1 : 0;
    s.descriptors *= std::max<int64_t>(sources, 1);
  }
  s.descriptor_bytes = run_bytes / static_cast<double>(pieces);
  return s;
}

}  // namespace nrtsim::nki
