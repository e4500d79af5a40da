#include "runtime/nki/Interpreter.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <sstream>

#include "runtime/Error.h"
#include "runtime/nki/Numerics.h"

namespace nrtsim::nki {
namespace {

void loop_matmul(int64_t m, int64_t n, int64_t k, const float* stationary, const float* moving,
                 float* out, bool accumulate) {
  if (!accumulate) std::fill(out, out + m * n, 0.0f);
  // k outermost: each row of the result is updated with a contiguous row of `moving`, which the
  // compiler vectorises.
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* srow = stationary + kk * m;
    const float* mrow = moving + kk * n;
    for (int64_t i = 0; i < m; ++i) {
      const float s = srow[i];
      float* orow = out + i * n;
      for (int64_t j = 0; j < n; ++j) orow[j] += s * mrow[j];
    }
  }
}

std::atomic<MatmulKernel> g_matmul{&loop_matmul};

[[noreturn]] void fail(const Program& p, size_t index, const std::string& what) {
  const Instruction& in = p.instructions[index];
  std::ostringstream os;
  os << "NKI kernel '" << p.name << "', instruction " << index << " (" << opcode_name(in.op)
     << ", line " << in.line << "): " << what;
  throw Error(ErrorCode::kInvalidArgument, os.str());
}

// Calls f(element offset of the run start, run length, run stride) for each innermost run of `v`.
template <class F>
void for_each_run(const View& v, F&& f) {
  if (v.ndim == 0) {
    f(v.offset, 1, 1);
    return;
  }
  const int last = v.ndim - 1;
  const int64_t inner = v.shape[last];
  if (inner == 0) return;
  std::array<int64_t, kMaxDims> idx{};
  int64_t outer = 1;
  for (int i = 0; i < last; ++i) outer *= v.shape[i];
  if (outer == 0) return;
  for (int64_t r = 0; r < outer; ++r) {
    int64_t off = v.offset;
    for (int i = 0; i < last; ++i) off += idx[i] * v.stride[i];
    f(off, inner, v.stride[last]);
    for (int i = last - 1; i >= 0; --i) {
      if (++idx[i] < v.shape[i]) break;
      idx[i] = 0;
    }
  }
}

float apply_alu(Alu op, float x, float y) {
  switch (op) {
    case Alu::kBypass: return x;
    case Alu::kAdd: return x + y;
    case Alu::kSubtract: return x - y;
    case Alu::kMultiply: return x * y;
    case Alu::kDivide: return x / y;
    case Alu::kMax: return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y);
    case Alu::kMin: return std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y);
    case Alu::kPow: return std::pow(x, y);
    case Alu::kMod: return std::fmod(x, y);
    case Alu::kEqual: return x == y ? 1.0f : 0.0f;
    case Alu::kNotEqual: return x != y ? 1.0f : 0.0f;
    case Alu::kGreater: return x > y ? 1.0f : 0.0f;
    case Alu::kGreaterEqual: return x >= y ? 1.0f : 0.0f;
    case Alu::kLess: return x < y ? 1.0f : 0.0f;
    case Alu::kLessEqual: return x <= y ? 1.0f : 0.0f;
    case Alu::kLogicalAnd: return (x != 0 && y != 0) ? 1.0f : 0.0f;
    case Alu::kLogicalOr: return (x != 0 || y != 0) ? 1.0f : 0.0f;
    case Alu::kLogicalXor: return ((x != 0) != (y != 0)) ? 1.0f : 0.0f;
    case Alu::kBitwiseAnd:
      return static_cast<float>(static_cast<int64_t>(x) & static_cast<int64_t>(y));
    case Alu::kBitwiseOr:
      return static_cast<float>(static_cast<int64_t>(x) | static_cast<int64_t>(y));
    case Alu::kBitwiseXor:
      return static_cast<float>(static_cast<int64_t>(x) ^ static_cast<int64_t>(y));
    case Alu::kAbsMax: return std::max(std::fabs(x), std::fabs(y));
    case Alu::kAbsMin: return std::min(std::fabs(x), std::fabs(y));
  }
  return x;
}

// x[i] = x[i] op y[i] (or y[i] op x[i] with `reverse`); y_step 0 repeats one scalar. The common
// operations get loops of their own, without a switch per element, so they vectorise.
void apply_alu_array(Alu op, float* x, const float* y, int64_t y_step, size_t n, bool reverse) {
  auto loop = [&](auto f) {
    for (size_t e = 0; e < n; ++e) {
      const float b = y[e * static_cast<size_t>(y_step)];
      x[e] = reverse ? f(b, x[e]) : f(x[e], b);
    }
  };
  switch (op) {
    case Alu::kBypass: return;
    case Alu::kAdd: loop([](float a, float b) { return a + b; }); return;
    case Alu::kSubtract: loop([](float a, float b) { return a - b; }); return;
    case Alu::kMultiply: loop([](float a, float b) { return a * b; }); return;
    case Alu::kDivide: loop([](float a, float b) { return a / b; }); return;
    default: loop([op](float a, float b) { return apply_alu(op, a, b); }); return;
  }
}

float reduce_identity(Alu op) {
  switch (op) {
    case Alu::kMultiply:
    case Alu::kLogicalAnd: return 1.0f;
    case Alu::kMax: return -INFINITY;
    case Alu::kMin: return INFINITY;
    default: return 0.0f;
  }
}

float apply_act(Act f, float x) {
  switch (f) {
    case Act::kCopy: return x;
    case Act::kExp: return std::exp(x);
    case Act::kLog: return std::log(x);
    case Act::kSqrt: return std::sqrt(x);
    case Act::kRsqrt: return 1.0f / std::sqrt(x);
    case Act::kReciprocal: return 1.0f / x;
    case Act::kTanh: return std::tanh(x);
    case Act::kSigmoid: return 1.0f / (1.0f + std::exp(-x));
    case Act::kRelu: return x > 0 ? x : (std::isnan(x) ? x : 0.0f);
    case Act::kGelu: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Act::kGeluTanh:
      return 0.5f * x * (1.0f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case Act::kSilu: return x / (1.0f + std::exp(-x));
    case Act::kSoftplus: return x > 20.0f ? x : std::log1p(std::exp(x));
    case Act::kErf: return std::erf(x);
    case Act::kSin: return std::sin(x);
    case Act::kCos: return std::cos(x);
    case Act::kAbs: return std::fabs(x);
    case Act::kSquare: return x * x;
    case Act::kSign: return x > 0 ? 1.0f : (x < 0 ? -1.0f : x);
    case Act::kNegate: return -x;
    case Act::kMish: return x * std::tanh(x > 20.0f ? x : std::log1p(std::exp(x)));
    case Act::kArctan: return std::atan(x);
  }
  return x;
}

// Where every buffer lives during one run.
struct Storage {
  std::vector<uint8_t*> base;
  std::vector<DType> dtype;
};

void gather(const Storage& mem, const View& v, float* out) {
  const DType dt = mem.dtype[v.buffer];
  const int64_t size = static_cast<int64_t>(dtype_size(dt));
  const uint8_t* base = mem.base[v.buffer];
  for_each_run(v, [&](int64_t off, int64_t n, int64_t stride) {
    load_run(dt, base + off * size, stride, n, out);
    out += n;
  });
}

void scatter(const Storage& mem, const View& v, const float* in) {
  const DType dt = mem.dtype[v.buffer];
  const int64_t size = static_cast<int64_t>(dtype_size(dt));
  uint8_t* base = mem.base[v.buffer];
  for_each_run(v, [&](int64_t off, int64_t n, int64_t stride) {
    store_run(dt, base + off * size, stride, n, in);
    in += n;
  });
}

std::vector<float> load(const Storage& mem, const View& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  gather(mem, v, out.data());
  return out;
}

void check_view(const Program& p, size_t index, const View& v, const char* role) {
  if (!v.valid()) return;
  if (v.buffer >= static_cast<int32_t>(p.buffers.size())) {
    fail(p, index, std::string(role) + " names buffer " + std::to_string(v.buffer) +
                       " of " + std::to_string(p.buffers.size()));
  }
  if (v.ndim < 0 || v.ndim > kMaxDims) fail(p, index, std::string(role) + " has a bad rank");
  if (v.numel() == 0) return;
  const int64_t elements = p.buffers[v.buffer].elements;
  if (v.lowest() < 0 || v.end() > elements) {
    std::ostringstream os;
    os << role << " reaches elements [" << v.lowest() << ", " << v.end() << ") of a buffer of "
       << elements;
    fail(p, index, os.str());
  }
}

void require_same_numel(const Program& p, size_t index, const View& a, const View& dst,
                        const char* role) {
  if (a.valid() && a.numel() != dst.numel()) {
    fail(p, index, std::string(role) + " has " + std::to_string(a.numel()) +
                       " elements, the destination " + std::to_string(dst.numel()));
  }
}

}  // namespace

void set_matmul_kernel(MatmulKernel kernel) { g_matmul.store(kernel ? kernel : &loop_matmul); }

Executable::Executable(Program program) : program_(std::move(program)) {
  const Program& p = program_;
  const size_t nb = p.buffers.size();
  std::vector<int64_t> first(nb, -1), last(nb, -1);
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction& in = p.instructions[i];
    const View* views[5] = {&in.dst, &in.a, &in.b, &in.c, &in.d};
    const char* roles[5] = {"dst", "a", "b", "c", "d"};
    for (int k = 0; k < 5; ++k) {
      check_view(p, i, *views[k], roles[k]);
      if (!views[k]->valid()) continue;
      const auto b = static_cast<size_t>(views[k]->buffer);
      if (first[b] < 0) first[b] = static_cast<int64_t>(i);
      last[b] = static_cast<int64_t>(i);
    }
    switch (in.op) {
      case Opcode::kMatmul:
        if (!in.a.valid() || !in.b.valid() || in.a.ndim < 1 || in.b.ndim < 1 ||
            in.a.shape[0] != in.b.shape[0]) {
          fail(p, i, "stationary and moving need the same contraction (partition) size");
        }
        if (in.dst.numel() != in.a.free_size() * in.b.free_size()) {
          fail(p, i, "destination must hold stationary free x moving free elements");
        }
        break;
      case Opcode::kTranspose:
      case Opcode::kTensorCopy:
      case Opcode::kDmaCopy: require_same_numel(p, i, in.a, in.dst, "source"); break;
      case Opcode::kTensorTensor:
        require_same_numel(p, i, in.a, in.dst, "data1");
        require_same_numel(p, i, in.b, in.dst, "data2");
        break;
      case Opcode::kTensorScalar:
      case Opcode::kActivation:
        require_same_numel(p, i, in.a, in.dst, "data");
        require_same_numel(p, i, in.b, in.dst, "operand");
        require_same_numel(p, i, in.c, in.dst, "operand");
        break;
      case Opcode::kSelect:
        require_same_numel(p, i, in.a, in.dst, "predicate");
        require_same_numel(p, i, in.b, in.dst, "on_true");
        require_same_numel(p, i, in.c, in.dst, "on_false");
        break;
      default: break;
    }
  }

  // Storage for the kernel's own buffers: a buffer takes a free slot of its memory that is large
  // enough (best fit) when it is first used and gives it back after its last use.
  slot_of_.assign(nb, -1);
  poison_before_.assign(p.instructions.size(), {});
  std::vector<std::vector<int32_t>> release_after(p.instructions.size());
  for (size_t b = 0; b < nb; ++b) {
    if (p.buffers[b].binding >= 0 || first[b] < 0) continue;
    poison_before_[static_cast<size_t>(first[b])].push_back(static_cast<int32_t>(b));
    release_after[static_cast<size_t>(last[b])].push_back(static_cast<int32_t>(b));
  }
  std::multimap<int64_t, int64_t> free_slots;  // bytes -> slot
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    for (int32_t b : poison_before_[i]) {
      const Buffer& buf = p.buffers[static_cast<size_t>(b)];
      const int64_t bytes = buf.elements * static_cast<int64_t>(dtype_size(buf.dtype));
      auto it = free_slots.lower_bound(bytes);
      if (it != free_slots.end()) {
        slot_of_[static_cast<size_t>(b)] = it->second;
        free_slots.erase(it);
      } else {
        slot_of_[static_cast<size_t>(b)] = static_cast<int64_t>(slot_bytes_.size());
        slot_bytes_.push_back(bytes);
        scratch_bytes_ += bytes;
      }
    }
    for (int32_t b : release_after[i]) {
      const int64_t slot = slot_of_[static_cast<size_t>(b)];
      free_slots.emplace(slot_bytes_[static_cast<size_t>(slot)], slot);
    }
  }
}

std::vector<std::string> Executable::run(const std::vector<External>& externals) const {
  const Program& p = program_;
  Storage mem;
  mem.base.resize(p.buffers.size(), nullptr);
  mem.dtype.resize(p.buffers.size());
  std::vector<std::vector<uint8_t>> slots(slot_bytes_.size());
  for (size_t s = 0; s < slots.size(); ++s) slots[s].resize(static_cast<size_t>(slot_bytes_[s]));
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    mem.dtype[b] = buf.dtype;
    const int64_t bytes = buf.elements * static_cast<int64_t>(dtype_size(buf.dtype));
    if (buf.binding >= 0) {
      if (buf.binding >= static_cast<int32_t>(externals.size())) {
        throw Error(ErrorCode::kInvalidArgument,
                    "NKI kernel '" + p.name + "' expects memory for argument " +
                        std::to_string(buf.binding) + ", got " +
                        std::to_string(externals.size()) + " buffers");
      }
      const External& ext = externals[static_cast<size_t>(buf.binding)];
      if (ext.bytes < bytes || (bytes > 0 && ext.data == nullptr)) {
        throw Error(ErrorCode::kInvalidArgument,
                    "NKI kernel '" + p.name + "': argument " + std::to_string(buf.binding) +
                        " has " + std::to_string(ext.bytes) + " bytes, the kernel needs " +
                        std::to_string(bytes));
      }
      mem.base[b] = ext.data;
      if (buf.poison) poison(buf.dtype, ext.data, buf.elements);
    } else if (slot_of_[b] >= 0) {
      mem.base[b] = slots[static_cast<size_t>(slot_of_[b])].data();
    }
  }

  std::vector<std::string> printed;
  MatmulKernel matmul = g_matmul.load();
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    for (int32_t b : poison_before_[i]) {
      poison(mem.dtype[static_cast<size_t>(b)], mem.base[static_cast<size_t>(b)],
             p.buffers[static_cast<size_t>(b)].elements);
    }
    const Instruction& in = p.instructions[i];
    switch (in.op) {
      case Opcode::kDmaCopy:
      case Opcode::kTensorCopy: {
        std::vector<float> x = load(mem, in.a);
        scatter(mem, in.dst, x.data());
        break;
      }
      case Opcode::kTensorTensor: {
        std::vector<float> x = load(mem, in.a);
        const std::vector<float> y = load(mem, in.b);
        apply_alu_array(in.alu0, x.data(), y.data(), 1, x.size(), false);
        scatter(mem, in.dst, x.data());
        break;
      }
      case Opcode::kTensorScalar: {
        std::vector<float> x = load(mem, in.a);
        std::vector<float> op0, op1;
        if (in.b.valid()) op0 = load(mem, in.b);
        if (in.c.valid()) op1 = load(mem, in.c);
        // The two operations in turn over the tile: the same FP32 results as one after the other
        // per element.
        const float imm0 = static_cast<float>(in.imm0), imm1 = static_cast<float>(in.imm1);
        apply_alu_array(in.alu0, x.data(), op0.empty() ? &imm0 : op0.data(), op0.empty() ? 0 : 1,
                        x.size(), in.reverse0);
        apply_alu_array(in.alu1, x.data(), op1.empty() ? &imm1 : op1.data(), op1.empty() ? 0 : 1,
                        x.size(), in.reverse1);
        scatter(mem, in.dst, x.data());
        break;
      }
      case Opcode::kActivation: {
        std::vector<float> x = load(mem, in.a);
        std::vector<float> bias, scale;
        if (in.b.valid()) bias = load(mem, in.b);
        if (in.c.valid()) scale = load(mem, in.c);
        const auto s0 = static_cast<float>(in.imm0);
        // The affine part first (vectorised), then the function.
        if (!scale.empty()) {
          apply_alu_array(Alu::kMultiply, x.data(), scale.data(), 1, x.size(), false);
        } else if (s0 != 1.0f) {
          apply_alu_array(Alu::kMultiply, x.data(), &s0, 0, x.size(), false);
        }
        if (!bias.empty()) apply_alu_array(Alu::kAdd, x.data(), bias.data(), 1, x.size(), false);
        switch (in.act) {
          case Act::kCopy: break;
          case Act::kExp:
            for (float& v : x) v = std::exp(v);
            break;
          default:
            for (float& v : x) v = apply_act(in.act, v);
            break;
        }
        if (in.d.valid()) {
          // Reduce along the free dims of each partition, as the engine's accumulators do.
          const int64_t parts = in.d.numel();
          const int64_t per = parts > 0 ? static_cast<int64_t>(x.size()) / parts : 0;
          std::vector<float> red(static_cast<size_t>(parts), reduce_identity(in.alu0));
          for (int64_t q = 0; q < parts; ++q) {
            for (int64_t e = 0; e < per; ++e) {
              red[q] = apply_alu(in.alu0, red[q], x[static_cast<size_t>(q * per + e)]);
            }
          }
          scatter(mem, in.d, red.data());
        }
        scatter(mem, in.dst, x.data());
        break;
      }
      case Opcode::kTensorReduce: {
        const std::vector<float> x = load(mem, in.a);
        // Strides of the result over a's dims: 0 for reduced dims.
        std::array<int64_t, kMaxDims> ostride{};
        int64_t out_n = 1;
        for (int d = in.a.ndim - 1; d >= 0; --d) {
          if (in.axes & (1u << d)) continue;
          ostride[d] = out_n;
          out_n *= in.a.shape[d];
        }
        std::vector<float> out(static_cast<size_t>(out_n), reduce_identity(in.alu0));
        std::array<int64_t, kMaxDims> idx{};
        for (size_t e = 0; e < x.size(); ++e) {
          int64_t o = 0;
          for (int d = 0; d < in.a.ndim; ++d) o += idx[d] * ostride[d];
          out[static_cast<size_t>(o)] = apply_alu(in.alu0, out[static_cast<size_t>(o)], x[e]);
          for (int d = in.a.ndim - 1; d >= 0; --d) {
            if (++idx[d] < in.a.shape[d]) break;
            idx[d] = 0;
          }
        }
        if (in.negate) {
          for (float& v : out) v = -v;
        }
        if (static_cast<int64_t>(out.size()) != in.dst.numel()) {
          fail(p, i, "destination has " + std::to_string(in.dst.numel()) +
                         " elements, the reduction gives " + std::to_string(out.size()));
        }
        scatter(mem, in.dst, out.data());
        break;
      }
      case Opcode::kMatmul: {
        const int64_t k = in.a.shape[0];
        const int64_t m = in.a.free_size();
        const int64_t n = in.b.free_size();
        const std::vector<float> s = load(mem, in.a);
        const std::vector<float> mv = load(mem, in.b);
        std::vector<float> out(static_cast<size_t>(m * n), 0.0f);
        if (in.accumulate) gather(mem, in.dst, out.data());
        matmul(m, n, k, s.data(), mv.data(), out.data(), in.accumulate);
        scatter(mem, in.dst, out.data());
        break;
      }
      case Opcode::kTranspose: {
        const int64_t rows = in.a.shape[0];
        const int64_t cols = in.a.free_size();
        const std::vector<float> x = load(mem, in.a);
        std::vector<float> t(x.size());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
        }
        scatter(mem, in.dst, t.data());
        break;
      }
      case Opcode::kIota: {
        std::vector<float> out(static_cast<size_t>(in.dst.numel()));
        std::array<int64_t, kMaxDims> idx{};
        for (size_t e = 0; e < out.size(); ++e) {
          double v = in.imm0 + static_cast<double>(idx[0]) * in.imm1;
          for (int d = 1; d < in.dst.ndim; ++d) v += static_cast<double>(in.pattern[d] * idx[d]);
          out[e] = static_cast<float>(v);
          for (int d = in.dst.ndim - 1; d >= 0; --d) {
            if (++idx[d] < in.dst.shape[d]) break;
            idx[d] = 0;
          }
        }
        scatter(mem, in.dst, out.data());
        break;
      }
      case Opcode::kMemset: {
        const std::vector<float> out(static_cast<size_t>(in.dst.numel()),
                                     static_cast<float>(in.imm0));
        scatter(mem, in.dst, out.data());
        break;
      }
      case Opcode::kSelect: {
        const std::vector<float> pred = load(mem, in.a);
        std::vector<float> x = load(mem, in.b);
        const std::vector<float> y = load(mem, in.c);
        for (size_t e = 0; e < x.size(); ++e) x[e] = pred[e] != 0 ? x[e] : y[e];
        scatter(mem, in.dst, x.data());
        break;
      }
      case Opcode::kPrint: {
        const std::vector<float> x = load(mem, in.a);
        std::ostringstream os;
        os << in.text << " [";
        for (int d = 0; d < in.a.ndim; ++d) os << (d ? ", " : "") << in.a.shape[d];
        os << "]:";
        for (float v : x) os << ' ' << v;
        printed.push_back(os.str());
        break;
      }
    }
  }
  return printed;
}

}  // namespace nrtsim::nki
