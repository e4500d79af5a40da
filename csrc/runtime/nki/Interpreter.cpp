#include "runtime/nki/Interpreter.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <memory>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <sstream>

#include "runtime/Error.h"
#include "runtime/nki/Alu.h"
#include "runtime/nki/Numerics.h"
#include "runtime/nki/PartitionWorkers.h"
#include "runtime/nki/TileLoops.h"

namespace nrtsim::nki {
namespace {

// Eight floats, for the blocked product below (GCC / Clang vector extensions; each lane's
// multiply and add are the scalar ones).
using Floats8 = float __attribute__((vector_size(32)));
inline Floats8 load8(const float* p) {
  Floats8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, Floats8 v) { std::memcpy(p, &v, sizeof v); }

// The product in blocks of 32 elements of a result row: a block's sums stay in registers over
// all k rows (one load and one store of the result per block, not one per row of k), and the
// loop is compiled for AVX2 as well as the x86-64 baseline, chosen when the library loads. Each
// result element is still out + s0 * m0 + s1 * m1 + ... in k order, each product and each sum
// rounded to FP32 apart: "avx2" does not enable FMA, so neither clone fuses them, and the bits
// are those of the plain loop. Tiny products cost the interpreter mostly this loop
// (depthwise_conv1d: a thousand [4, 1] x [4, 512] a call).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void loop_matmul(int64_t m, int64_t n, int64_t k, const float* stationary, int64_t srows,
                 const float* moving, int64_t mrows, float* out, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    float* orow = out + i * n;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      Floats8 a0{}, a1{}, a2{}, a3{};
      if (accumulate) {
        a0 = load8(orow + j);
        a1 = load8(orow + j + 8);
        a2 = load8(orow + j + 16);
        a3 = load8(orow + j + 24);
      }
      for (int64_t kk = 0; kk < k; ++kk) {
        const float s = stationary[kk * srows + i];
        const float* mrow = moving + kk * mrows + j;
        a0 += s * load8(mrow);
        a1 += s * load8(mrow + 8);
        a2 += s * load8(mrow + 16);
        a3 += s * load8(mrow + 24);
      }
      store8(orow + j, a0);
      store8(orow + j + 8, a1);
      store8(orow + j + 16, a2);
      store8(orow + j + 24, a3);
    }
    for (; j < n; ++j) {
      float acc = accumulate ? orow[j] : 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) acc += stationary[kk * srows + i] * moving[kk * mrows + j];
      orow[j] = acc;
    }
  }
}

std::atomic<MatmulKernel> g_matmul{&loop_matmul};
constexpr int64_t kSmallMatmulMacs = 16384;
// Matmuls of at least this many multiply-accumulates (a [128, 128] x [128, 256] product, about
// 60 us of GEMM on the host measured) are computed as two halves of the result's rows, whole
// blocks of 16 rows, which two threads can share. On one thread two GEMMs cost more than one
// (measured at K = M = 128: +35% at N = 128, +18% at N = 512), so smaller products (flash
// attention's [128, 128] x [128, 128] tiles) stay whole.
constexpr int64_t kSplitMatmulMacs = int64_t{1} << 22;
constexpr int64_t kSplitMatmulRows = 16;

// A thread's copies of a split matmul's operands (Rows::stage), kept between instructions so
// that the buffers stay in its core's cache; `tag` names the instruction they were made for.
struct MatmulCopies {
  uint64_t tag = 0;
  const float* s = nullptr;
  const float* mv = nullptr;
  std::vector<float> s_buffer, mv_buffer;
  // A large tile's copies are not kept for long: the calling thread lets them go when the
  // instruction ends, a worker at its next split matmul; smaller ones are kept for reuse.
  void release_large() {
    constexpr size_t kKeep = size_t{1} << 20;  // floats
    if (s_buffer.capacity() > kKeep) std::vector<float>().swap(s_buffer);
    if (mv_buffer.capacity() > kKeep) std::vector<float>().swap(mv_buffer);
    tag = 0;
  }
};
thread_local MatmulCopies t_matmul_copies;
std::atomic<uint64_t> g_matmul_tag{0};

// The floats by which `p` lies past a 64-byte boundary.
int64_t misalign(const float* p) {
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % 64) / 4;
}

// Whether `kernel` gives a [m, n] product's bits when it computes the product as two GEMMs on
// the halves of the result's rows (split at `half`) as when it computes it whole: the same sums
// in the same order. A BLAS may choose its method by size or by the operands' alignment, so it
// is probed, once per process for each shape, row steps, alignments (within 64 bytes) and
// accumulate flag, on pseudo-random operands, where any difference in summation order shows in
// the bits. (The operands and the result are given by their misalignments: a copied operand
// is not copied yet when this is asked.)
bool halves_match_whole(MatmulKernel kernel, int64_t m, int64_t n, int64_t k, int64_t half,
                        int64_t s_misalign, int64_t s_step, int64_t mv_misalign,
                        int64_t mv_step, int64_t out_misalign, bool accumulate) {
  using Key = std::array<int64_t, 11>;
  const Key key{static_cast<int64_t>(reinterpret_cast<uintptr_t>(kernel)), m, n, k, half, s_step,
                mv_step, s_misalign, mv_misalign, out_misalign, accumulate ? 1 : 0};
  static std::mutex mu;
  static std::map<Key, bool> known;
  {
    const std::lock_guard<std::mutex> lock(mu);
    const auto it = known.find(key);
    if (it != known.end()) return it->second;
  }
  // 64-byte aligned blocks, each operand placed at the real one's offset within 64 bytes.
  auto block = [](int64_t elements, int64_t shift) {
    std::vector<float> v(static_cast<size_t>(elements + 32));
    const auto base = reinterpret_cast<uintptr_t>(v.data());
    const auto skip = static_cast<int64_t>(((64 - base % 64) % 64) / 4) + shift;
    return std::make_pair(std::move(v), skip);
  };
  uint32_t state = 0x9e3779b9u;
  auto fill = [&](float* p, int64_t count) {
    for (int64_t e = 0; e < count; ++e) {
      state = state * 1664525u + 1013904223u;
      p[e] = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) / (1 << 23);
    }
  };
  auto [sv, s0] = block(k * s_step, s_misalign);
  auto [mvv, m0] = block(k * mv_step, mv_misalign);
  auto [whole, w0] = block(m * n, out_misalign);
  auto [parts, p0] = block(m * n, out_misalign);
  fill(sv.data() + s0, k * s_step);
  fill(mvv.data() + m0, k * mv_step);
  fill(whole.data() + w0, m * n);
  std::copy(whole.begin() + w0, whole.begin() + w0 + m * n, parts.begin() + p0);
  const float* sp = sv.data() + s0;
  const float* mp = mvv.data() + m0;
  kernel(m, n, k, sp, s_step, mp, mv_step, whole.data() + w0, accumulate);
  kernel(half, n, k, sp, s_step, mp, mv_step, parts.data() + p0, accumulate);
  kernel(m - half, n, k, sp + half, s_step, mp, mv_step, parts.data() + p0 + half * n,
         accumulate);
  const bool same = std::memcmp(whole.data() + w0, parts.data() + p0,
                                static_cast<size_t>(m * n) * sizeof(float)) == 0;
  const std::lock_guard<std::mutex> lock(mu);
  known.emplace(key, same);
  return same;
}

[[noreturn]] void fail(const Program& p, size_t index, const std::string& what) {
  const Instruction& in = p.instructions[index];
  std::ostringstream os;
  os << "NKI kernel '" << p.name << "', instruction " << index << " (" << opcode_name(in.op)
     << ", line " << in.line << "): " << what;
  throw Error(ErrorCode::kInvalidArgument, os.str());
}

// `v` with the same elements in the same order over as few dims as they allow: size-1 dims
// dropped, and a dim merged into the next where it steps over exactly that dim's extent (a
// tile's free dims, contiguous, become one). The walks below then take runs as long as memory
// allows instead of one run per innermost row.
View coalesced(const View& v) {
  // One result object written in place (every return names it): a copy modified field by field
  // and then returned stalled on store forwarding, at a cost that showed in small instructions.
  View c = v;
  if (v.ndim <= 1) return c;
  int n = 0;
  for (int d = 0; d < v.ndim; ++d) {
    const int64_t size = v.shape[d], step = v.stride[d];
    if (size == 1) continue;
    if (size == 0) {  // no elements: one empty dim
      c.shape[0] = 0;
      c.stride[0] = 1;
      c.ndim = 1;
      return c;
    }
    if (n > 0 && c.stride[n - 1] == step * size) {
      c.shape[n - 1] *= size;
      c.stride[n - 1] = step;
      continue;
    }
    c.shape[n] = size;
    c.stride[n] = step;
    ++n;
  }
  if (n == 0) {  // one element
    c.shape[0] = 1;
    c.stride[0] = 1;
    n = 1;
  }
  c.ndim = n;  // (dims from n on keep stale values: nothing reads past ndim)
  return c;
}

// Calls f(element offset of the run start, run length, run stride) for each innermost run of `v`.
template <class F>
void for_each_run(const View& view, F&& f) {
  const View v = coalesced(view);
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

// x[i] = x[i] op y[i] (or y[i] op x[i] with `reverse`); y_step 0 repeats one scalar.
void apply_alu_array(Alu op, float* x, const float* y, int64_t y_step, size_t n, bool reverse) {
  if (op == Alu::kBypass) return;
  with_alu(op, [&](auto f) {
    for (size_t e = 0; e < n; ++e) {
      const float b = y[e * static_cast<size_t>(y_step)];
      x[e] = reverse ? f(b, x[e]) : f(x[e], b);
    }
  });
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
    case Act::kTan: return std::tan(x);
    case Act::kCeil: return std::ceil(x);
    case Act::kFloor: return std::floor(x);
    case Act::kTrunc: return std::trunc(x);
    case Act::kGeluDx: {
      // d/dx x * Phi(x) = Phi(x) + x * phi(x)
      const float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678118654752f));
      return cdf + x * 0.39894228040143268f * std::exp(-0.5f * x * x);
    }
    case Act::kGeluSigmoid: return x / (1.0f + std::exp(-1.702f * x));
    case Act::kGeluSigmoidDx: {
      const float s = 1.0f / (1.0f + std::exp(-1.702f * x));
      return s + 1.702f * x * s * (1.0f - s);
    }
    case Act::kSiluDx: {
      const float s = 1.0f / (1.0f + std::exp(-x));
      return s + x * s * (1.0f - s);
    }
    case Act::kErfDx: return 1.12837916709551257f * std::exp(-x * x);
    case Act::kLogicalNot: return x == 0 ? 1.0f : 0.0f;
    case Act::kPrelu: return x;  // its slope comes with the instruction (run_selection)
  }
  return x;
}

// Where every buffer lives during one run.
struct Storage {
  std::vector<uint8_t*> base;
  std::vector<DType> dtype;
  // Whether the external buffers' memory ranges are pairwise disjoint (the caller may pass one
  // array twice): only then do different buffers mean different memory.
  bool distinct = true;
  const CollectiveHook* collectives = nullptr;  // the exchange of collective instructions
  DType of(const View& v) const { return v.dtype >= 0 ? static_cast<DType>(v.dtype) : dtype[v.buffer]; }
};

// `v`'s elements, in view order, as a [rows, cols] grid: the element steps of a row and of a
// column. False where its dims do not reduce to two.
bool as_grid(const View& v, int64_t rows, int64_t cols, int64_t& row_step, int64_t& col_step) {
  if (v.numel() != rows * cols || rows < 1 || cols < 1) return false;
  const View c = coalesced(v);
  if (c.ndim == 1) {
    col_step = c.stride[0];
    row_step = cols * c.stride[0];
    return true;
  }
  if (c.ndim == 2 && c.shape[0] == rows && c.shape[1] == cols) {
    row_step = c.stride[0];
    col_step = c.stride[1];
    return true;
  }
  return false;
}

template <typename T, bool kQuietBf16Nan>
void transpose_bits(const T* src, int64_t sr, int64_t sc, T* dst, int64_t dr, int64_t dc,
                    int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 16;  // a block of rows and columns in cache on both sides
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int64_t r1 = std::min(rows, r0 + kBlock);
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t c1 = std::min(cols, c0 + kBlock);
      for (int64_t c = c0; c < c1; ++c) {
        T* out = dst + c * dr;
        const T* in = src + c * sc;
        for (int64_t r = r0; r < r1; ++r) {
          T x = in[r * sr];
          if constexpr (kQuietBf16Nan) {
            if ((x & 0x7fffu) > 0x7f80u) x = static_cast<T>(x | 0x40u);
          }
          out[r * dc] = x;
        }
      }
    }
  }
}

// nc_transpose of an FP32 or BF16 tile into one of its own dtype, as a [rows, cols] grid into a
// [cols, rows] one on both sides, moving the elements' bits: what the staged path (to FP32 and
// back) gives, a BF16 NaN made quiet as its conversion back does, without the two passes
// through FP32 (flash attention's 256 [128, 128] BF16 transposes: 46 -> 8 us each). False where
// it does not apply: the caller takes the staged path.
bool transpose_direct(const Storage& mem, const Instruction& in, int64_t rows, int64_t cols) {
  const DType dt = mem.of(in.a);
  if (dt != mem.of(in.dst) || (dt != DType::kFloat32 && dt != DType::kBFloat16)) return false;
  if (!mem.distinct || in.a.buffer == in.dst.buffer) return false;
  int64_t sr = 0, sc = 0, dr = 0, dc = 0;
  if (!as_grid(in.a, rows, cols, sr, sc) || !as_grid(in.dst, cols, rows, dr, dc)) return false;
  if (dt == DType::kFloat32) {
    transpose_bits<uint32_t, false>(
        reinterpret_cast<const uint32_t*>(mem.base[in.a.buffer]) + in.a.offset, sr, sc,
        reinterpret_cast<uint32_t*>(mem.base[in.dst.buffer]) + in.dst.offset, dr, dc, rows, cols);
  } else {
    transpose_bits<uint16_t, true>(
        reinterpret_cast<const uint16_t*>(mem.base[in.a.buffer]) + in.a.offset, sr, sc,
        reinterpret_cast<uint16_t*>(mem.base[in.dst.buffer]) + in.dst.offset, dr, dc, rows, cols);
  }
  return true;
}

void gather(const Storage& mem, const View& v, float* out) {
  const DType dt = mem.of(v);
  const int64_t size = static_cast<int64_t>(dtype_size(dt));
  const uint8_t* base = mem.base[v.buffer];
  for_each_run(v, [&](int64_t off, int64_t n, int64_t stride) {
    load_run(dt, base + off * size, stride, n, out);
    out += n;
  });
}

void scatter(const Storage& mem, const View& v, const float* in) {
  const DType dt = mem.of(v);
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

// Whether `v`'s elements, in view order, are one contiguous stretch of its buffer.
bool is_dense(const View& v) {
  int64_t expect = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    if (v.shape[d] == 1) continue;
    if (v.stride[d] != expect) return false;
    expect *= v.shape[d];
  }
  return true;
}

// A read-only operand's elements as FP32 in view order: the buffer's memory itself when the
// view is one contiguous FP32 stretch (no staging copy), else a converted copy. Instructions
// compute their results into memory of their own before they write them, so reading an operand
// in place is safe even where the destination overlaps it.
class Floats {
 public:
  Floats() = default;
  Floats(const Storage& mem, const View& v) : n_(static_cast<size_t>(v.numel())) {
    if (mem.of(v) == DType::kFloat32 && is_dense(v)) {
      p_ = reinterpret_cast<const float*>(mem.base[v.buffer]) + v.offset;
    } else {
      own_.resize(n_);
      gather(mem, v, own_.data());
      p_ = own_.data();
    }
  }
  const float* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const float& operator[](size_t i) const { return p_[i]; }
  const float* begin() const { return p_; }
  const float* end() const { return p_ + n_; }

 private:
  std::vector<float> own_;
  const float* p_ = nullptr;
  size_t n_ = 0;
};

// A matmul operand [K, free] as K rows of `free` contiguous FP32 values: in place where the
// view's free dims are dense FP32 (any partition stride: a window into a wider tile), else a
// dense copy.
class Rows {
 public:
  // `staged`: always a dense copy, rows of free_size() elements in view order. `defer`: a copy
  // is not made here (data() is null) but by stage(), on the thread that uses it.
  Rows(const Storage& mem, const View& v, bool staged = false, bool defer = false) {
    const int64_t free = v.free_size();
    int64_t expect = 1;
    bool dense_free = !staged && mem.of(v) == DType::kFloat32;
    for (int d = v.ndim - 1; d >= 1 && dense_free; --d) {
      if (v.shape[d] == 1) continue;
      dense_free = v.stride[d] == expect;
      expect *= v.shape[d];
    }
    if (dense_free && v.ndim >= 1) {
      p_ = reinterpret_cast<const float*>(mem.base[v.buffer]) + v.offset;
      step_ = v.shape[0] > 1 ? v.stride[0] : free;
    } else {
      step_ = free;
      if (!defer) p_ = stage(mem, v, own_);
    }
  }
  const float* data() const { return p_; }
  int64_t step() const { return step_; }  // elements from one row to the next
  bool in_place() const { return p_ != nullptr; }
  // Where data() is or will be, in floats past a 64-byte boundary: a copy starts on one.
  int64_t misalignment() const { return p_ ? misalign(p_) : 0; }

  // `v`'s dense copy in `buffer`, starting on a 64-byte boundary wherever the buffer lies, so
  // that a GEMM sees the same alignment whichever thread made the copy: a BLAS may choose its
  // method, and so its summation order, by its operands' alignment.
  static const float* stage(const Storage& mem, const View& v, std::vector<float>& buffer) {
    const auto count = static_cast<size_t>(v.numel());
    if (buffer.size() < count + 16) buffer.resize(count + 16);
    float* p = buffer.data() + misalign_gap(buffer.data());
    gather(mem, v, p);
    return p;
  }

 private:
  static int64_t misalign_gap(const float* p) { return (16 - misalign(p)) % 16; }
  std::vector<float> own_;
  const float* p_ = nullptr;
  int64_t step_ = 0;
};

// The bytes of `v`'s elements in view order (a same-dtype copy moves bits, not values).
std::vector<uint8_t> load_raw(const Storage& mem, const View& v) {
  const auto size = static_cast<int64_t>(dtype_size(mem.of(v)));
  std::vector<uint8_t> out(static_cast<size_t>(v.numel() * size));
  uint8_t* o = out.data();
  const uint8_t* base = mem.base[v.buffer];
  for_each_run(v, [&](int64_t off, int64_t n, int64_t stride) {
    if (stride == 1) {
      std::memcpy(o, base + off * size, static_cast<size_t>(n * size));
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(o + i * size, base + (off + i * stride) * size, size);
    }
    o += n * size;
  });
  return out;
}

// The innermost runs of a view, one at a time (for_each_run as a cursor), so that two views
// with different run structures can be walked together.
class RunCursor {
 public:
  explicit RunCursor(const View& view) : v_(coalesced(view)) {
    const View& v = v_;
    if (v.ndim == 0) {
      outer_ = 1;
      inner_ = 1;
      stride_ = 1;
    } else {
      inner_ = v.shape[v.ndim - 1];
      stride_ = v.stride[v.ndim - 1];
      outer_ = inner_ ? 1 : 0;
      for (int i = 0; i + 1 < v.ndim; ++i) outer_ *= v.shape[i];
    }
    start();
  }
  bool done() const { return row_ >= outer_; }
  int64_t offset() const { return off_ + pos_ * stride_; }  // element offset of the next element
  int64_t stride() const { return stride_; }
  int64_t left() const { return inner_ - pos_; }  // elements left in this run
  void advance(int64_t n) {
    pos_ += n;
    if (pos_ < inner_) return;
    pos_ = 0;
    ++row_;
    for (int i = v_.ndim - 2; i >= 0; --i) {
      if (++idx_[i] < v_.shape[i]) break;
      idx_[i] = 0;
    }
    start();
  }

 private:
  void start() {
    off_ = v_.offset;
    for (int i = 0; i + 1 < v_.ndim; ++i) off_ += idx_[i] * v_.stride[i];
  }
  View v_;
  std::array<int64_t, kMaxDims> idx_{};
  int64_t outer_ = 0, inner_ = 0, stride_ = 1, row_ = 0, pos_ = 0, off_ = 0;
};

// dst = src, element for element in view order, both of the same dtype: the bytes move directly
// (no staging copy), contiguous stretches by memcpy. Views that overlap are staged (load_raw).
bool views_may_overlap(const Storage& mem, const View& a, const View& b) {
  return a.buffer == b.buffer || !mem.distinct;
}

void store_raw(const Storage& mem, const View& v, const uint8_t* in);
std::vector<uint8_t> load_raw(const Storage& mem, const View& v);

void copy_raw(const Storage& mem, const View& src, const View& dst) {
  if (views_may_overlap(mem, src, dst)) {
    const std::vector<uint8_t> raw = load_raw(mem, src);
    store_raw(mem, dst, raw.data());
    return;
  }
  const auto size = static_cast<int64_t>(dtype_size(mem.of(src)));
  const uint8_t* sbase = mem.base[src.buffer];
  uint8_t* dbase = mem.base[dst.buffer];
  {
    // Both one dense stretch of the same length (a whole tile, a row): one memcpy, without the
    // cursors' set-up, which costs a small copy as much as its bytes.
    const View sc = coalesced(src), dc = coalesced(dst);
    if (sc.ndim == 1 && dc.ndim == 1 && sc.stride[0] == 1 && dc.stride[0] == 1 &&
        sc.shape[0] == dc.shape[0]) {
      std::memcpy(dbase + dc.offset * size, sbase + sc.offset * size,
                  static_cast<size_t>(sc.shape[0] * size));
      return;
    }
  }
  RunCursor s(src), d(dst);
  while (!s.done() && !d.done()) {
    const int64_t n = std::min(s.left(), d.left());
    const uint8_t* sp = sbase + s.offset() * size;
    uint8_t* dp = dbase + d.offset() * size;
    if (s.stride() == 1 && d.stride() == 1) {
      std::memcpy(dp, sp, static_cast<size_t>(n * size));
    } else {
      const int64_t ss = s.stride() * size, ds = d.stride() * size;
      for (int64_t i = 0; i < n; ++i) std::memcpy(dp + i * ds, sp + i * ss, static_cast<size_t>(size));
    }
    s.advance(n);
    d.advance(n);
  }
}

void store_raw(const Storage& mem, const View& v, const uint8_t* in) {
  const auto size = static_cast<int64_t>(dtype_size(mem.of(v)));
  uint8_t* base = mem.base[v.buffer];
  for_each_run(v, [&](int64_t off, int64_t n, int64_t stride) {
    if (stride == 1) {
      std::memcpy(base + off * size, in, static_cast<size_t>(n * size));
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(base + (off + i * stride) * size, in + i * size, size);
    }
    in += n * size;
  });
}

// Elementwise instructions computed chunk by chunk from their operands' memory straight into
// their destination's: no staging copy of whole tiles, and operands that are contiguous FP32 are
// read in place. The staged path computes every result before writing any, so an operand may
// overlap the destination there; here an operand may share the destination's memory only as the
// very same view (each element is then read before its result is written over it).
constexpr int64_t kChunk = 2048;

bool same_view(const View& a, const View& b) {
  if (a.buffer != b.buffer || a.dtype != b.dtype || a.offset != b.offset || a.ndim != b.ndim) {
    return false;
  }
  for (int d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d] || a.stride[d] != b.stride[d]) return false;
  }
  return true;
}

bool streamable(const Storage& mem, const View& dst, std::initializer_list<const View*> operands) {
  if (!mem.distinct) return false;
  for (const View* v : operands) {
    if (v->valid() && v->buffer == dst.buffer && !same_view(*v, dst)) return false;
  }
  return true;
}

// n consecutive operand elements: p[e * step], step 0 for one value repeated.
struct Chunk {
  const float* p;
  int64_t step;
};

// An operand's elements in view order, chunk by chunk.
class ChunkReader {
 public:
  ChunkReader(const Storage& mem, const View& v)
      : cur_(v), dtype_(mem.of(v)), size_(static_cast<int64_t>(dtype_size(dtype_))),
        base_(mem.base[v.buffer]) {}
  // The next n elements: in place when they are one contiguous (or broadcast) FP32 stretch,
  // else converted into buf (kChunk floats).
  Chunk next(int64_t n, float* buf) {
    if (cur_.left() >= n && (cur_.stride() == 0 || (cur_.stride() == 1 && dtype_ == DType::kFloat32))) {
      const uint8_t* at = base_ + cur_.offset() * size_;
      const int64_t step = cur_.stride();
      cur_.advance(n);
      if (dtype_ == DType::kFloat32) return {reinterpret_cast<const float*>(at), step};
      load_run(dtype_, at, 1, 1, buf);
      return {buf, 0};
    }
    float* out = buf;
    for (int64_t left = n; left > 0;) {
      const int64_t k = std::min(left, cur_.left());
      load_run(dtype_, base_ + cur_.offset() * size_, cur_.stride(), k, out);
      out += k;
      left -= k;
      cur_.advance(k);
    }
    return {buf, 1};
  }

 private:
  RunCursor cur_;
  DType dtype_;
  int64_t size_;
  const uint8_t* base_;
};

// out[e] = f(x[e], y[e]) over n elements, each operand read with its own step.
template <class F>
void binary(F f, float* out, Chunk x, Chunk y, int64_t n) {
  if (x.step && y.step) {
    for (int64_t e = 0; e < n; ++e) out[e] = f(x.p[e], y.p[e]);
  } else if (x.step) {
    const float b = y.p[0];
    for (int64_t e = 0; e < n; ++e) out[e] = f(x.p[e], b);
  } else if (y.step) {
    const float a = x.p[0];
    for (int64_t e = 0; e < n; ++e) out[e] = f(a, y.p[e]);
  } else {
    std::fill(out, out + n, f(x.p[0], y.p[0]));
  }
}

// out = x (op) y, or y (op) x with `reverse`; bypass keeps x (as apply_alu_array does).
void apply_chunk(Alu op, float* out, Chunk x, Chunk y, int64_t n, bool reverse) {
  if (op == Alu::kBypass) {
    if (x.step == 0) {
      std::fill(out, out + n, x.p[0]);
    } else if (out != x.p) {
      std::memcpy(out, x.p, static_cast<size_t>(n) * sizeof(float));
    }
    return;
  }
  with_alu(op, [&](auto f) {
    if (reverse) {
      binary(f, out, y, x, n);
    } else {
      binary(f, out, x, y, n);
    }
  });
}

// Runs compute(out, in, n) over dst's elements in chunks, in[k] being operand k's next n
// elements; out is dst's own memory where dst is contiguous FP32 there, else a buffer stored
// (rounded to dst's format) after compute.
template <size_t N, class Compute>
void stream(const Storage& mem, const View& dst, const std::array<const View*, N>& operands,
            Compute&& compute) {
  // On the stack, uninitialised: every instruction streams, and a zeroed heap block per
  // instruction cost more than small instructions' own work.
  alignas(64) float scratch[(N + 1) * kChunk];
  std::array<std::optional<ChunkReader>, N> readers;
  for (size_t k = 0; k < N; ++k) {
    if (operands[k]->valid()) readers[k].emplace(mem, *operands[k]);
  }
  const DType dt = mem.of(dst);
  const auto size = static_cast<int64_t>(dtype_size(dt));
  uint8_t* base = mem.base[dst.buffer];
  float* staged = scratch + N * kChunk;
  for (RunCursor d(dst); !d.done();) {
    const int64_t n = std::min(kChunk, d.left());
    std::array<Chunk, N> in{};
    for (size_t k = 0; k < N; ++k) {
      if (readers[k]) in[k] = readers[k]->next(n, scratch + k * kChunk);
    }
    uint8_t* at = base + d.offset() * size;
    const bool direct = dt == DType::kFloat32 && d.stride() == 1;
    float* out = direct ? reinterpret_cast<float*>(at) : staged;
    compute(out, in, n);
    if (!direct) store_run(dt, at, d.stride(), n, staged);
    d.advance(n);
  }
}

// A free-dim reduction (alu2 into the accumulators e, out to d) in three steps, so a streamed
// instruction can fold its results chunk by chunk: the accumulators' starting values, the fold
// (each partition's elements in order), and the stores.
struct Reduction {
  View acc;
  std::vector<float> r;
  int64_t per = 0;  // elements per partition
  bool folds = false;
};

Reduction reduce_start(const Storage& mem, const Instruction& in, int64_t elements) {
  Reduction red;
  const int64_t parts = in.dst.valid() && in.dst.ndim > 0 ? in.dst.shape[0] : 1;
  red.per = parts > 0 ? elements / parts : 0;
  red.acc = in.e;
  red.acc.shape[0] = parts;
  red.r = load(mem, red.acc);
  const ReduceCmd cmd = in.reduce_cmd == ReduceCmd::kIdle ? ReduceCmd::kResetReduce : in.reduce_cmd;
  if (cmd == ReduceCmd::kReset || cmd == ReduceCmd::kResetReduce) {
    std::fill(red.r.begin(), red.r.end(), reduce_identity(in.alu2));
  } else if (cmd == ReduceCmd::kLoadReduce) {
    if (in.f.valid()) {
      red.r = load(mem, in.f);
    } else {
      std::fill(red.r.begin(), red.r.end(), static_cast<float>(in.imm2));
    }
  }
  red.folds = cmd != ReduceCmd::kReset;
  return red;
}

// Folds n results, elements [pos, pos + n) in view order, into their partitions' accumulators.
void reduce_fold(Reduction& red, Alu op, const float* x, int64_t pos, int64_t n) {
  if (!red.folds || red.per <= 0) return;
  for (int64_t e = 0; e < n;) {
    const int64_t q = (pos + e) / red.per;
    const int64_t take = std::min(n - e, red.per - (pos + e) % red.per);
    float v = red.r[static_cast<size_t>(q)];
    for (int64_t k = 0; k < take; ++k) v = apply_alu(op, v, x[e + k]);
    red.r[static_cast<size_t>(q)] = v;
    e += take;
  }
}

void reduce_finish(const Storage& mem, const Instruction& in, Reduction& red) {
  scatter(mem, red.acc, red.r.data());
  if (in.d.valid()) {
    if (in.negate) {
      for (float& v : red.r) v = -v;
    }
    scatter(mem, in.d, red.r.data());
  }
}

// The streamed forms of the elementwise instructions; false where the staged path must run.
bool run_streamed(const Storage& mem, const Instruction& in) {
  switch (in.op) {
    case Opcode::kTensorCopy:
    case Opcode::kDmaCopy:
      // Same-dtype copies move bytes (copy_raw); conversions stream.
      if (!streamable(mem, in.dst, {&in.a})) return false;
      stream<1>(mem, in.dst, {&in.a}, [](float* out, const std::array<Chunk, 1>& x, int64_t n) {
        apply_chunk(Alu::kBypass, out, x[0], x[0], n, false);
      });
      return true;
    case Opcode::kTensorTensor:
      if (!streamable(mem, in.dst, {&in.a, &in.b})) return false;
      stream<2>(mem, in.dst, {&in.a, &in.b}, [&](float* out, const std::array<Chunk, 2>& x, int64_t n) {
        apply_chunk(in.alu0, out, x[0], x[1], n, false);
      });
      return true;
    case Opcode::kTensorScalar: {
      if (in.alu2 != Alu::kBypass && in.e.valid()) return false;  // the reduction: staged
      if (!streamable(mem, in.dst, {&in.a, &in.b, &in.c})) return false;
      const float imm0 = static_cast<float>(in.imm0), imm1 = static_cast<float>(in.imm1);
      stream<3>(mem, in.dst, {&in.a, &in.b, &in.c},
                [&](float* out, const std::array<Chunk, 3>& x, int64_t n) {
                  const Chunk s0 = in.b.valid() ? x[1] : Chunk{&imm0, 0};
                  const Chunk s1 = in.c.valid() ? x[2] : Chunk{&imm1, 0};
                  // operand1 read in place from dst itself (acc = data * s + acc): the first
                  // operation's results go to a buffer, or they would overwrite operand1 before
                  // the second reads it.
                  alignas(64) float first[kChunk];
                  float* mid = s1.p == out ? first : out;
                  apply_chunk(in.alu0, mid, x[0], s0, n, in.reverse0);
                  apply_chunk(in.alu1, out, Chunk{mid, 1}, s1, n, in.reverse1);
                });
      return true;
    }
    case Opcode::kActivation: {
      // With a reduction the results fold as they stream (flash attention's exp with its row
      // sums), each partition's in the staged path's order; the accumulators are read before
      // and written after the destination, so they must not share its memory.
      const bool reduces = in.alu2 != Alu::kBypass && in.e.valid();
      if (reduces && (in.e.buffer == in.dst.buffer || in.d.buffer == in.dst.buffer ||
                      in.f.buffer == in.dst.buffer)) {
        return false;
      }
      if (!streamable(mem, in.dst, {&in.a, &in.b, &in.c})) return false;
      const auto s0 = static_cast<float>(in.imm0), b1 = static_cast<float>(in.imm1);
      const Alu bias_op = in.reverse0 ? Alu::kSubtract : Alu::kAdd;
      // A bias or scale read in place from dst itself would be overwritten by the first step
      // before it is read: the staged path loads every operand first.
      if ((in.b.valid() && same_view(in.b, in.dst)) || (in.c.valid() && same_view(in.c, in.dst))) {
        return false;
      }
      std::optional<Reduction> red;
      if (reduces) red.emplace(reduce_start(mem, in, in.a.numel()));
      int64_t pos = 0;
      stream<3>(mem, in.dst, {&in.a, &in.b, &in.c},
                [&](float* out, const std::array<Chunk, 3>& x, int64_t n) {
                  // As the staged path: scale, then bias, then the function.
                  apply_chunk(Alu::kBypass, out, x[0], x[0], n, false);
                  if (in.c.valid()) {
                    apply_chunk(Alu::kMultiply, out, Chunk{out, 1}, x[2], n, false);
                  } else if (s0 != 1.0f) {
                    apply_chunk(Alu::kMultiply, out, Chunk{out, 1}, Chunk{&s0, 0}, n, false);
                  }
                  if (in.b.valid()) {
                    apply_chunk(bias_op, out, Chunk{out, 1}, x[1], n, false);
                  } else if (b1 != 0.0f) {
                    apply_chunk(bias_op, out, Chunk{out, 1}, Chunk{&b1, 0}, n, false);
                  }
                  switch (in.act) {
                    case Act::kCopy: break;
                    case Act::kExp:
                      for (int64_t e = 0; e < n; ++e) out[e] = std::exp(out[e]);
                      break;
                    default:
                      for (int64_t e = 0; e < n; ++e) out[e] = apply_act(in.act, out[e]);
                      break;
                  }
                  if (red) reduce_fold(*red, in.alu2, out, pos, n);
                  pos += n;
                });
      if (red) reduce_finish(mem, in, *red);
      return true;
    }
    case Opcode::kMemset: {
      if (!mem.distinct) return false;
      const auto v = static_cast<float>(in.imm0);
      stream<0>(mem, in.dst, {}, [&](float* out, const std::array<Chunk, 0>&, int64_t n) {
        std::fill(out, out + n, v);
      });
      return true;
    }
    case Opcode::kSelect: {
      if (!streamable(mem, in.dst, {&in.a, &in.b, &in.c})) return false;
      const auto v = static_cast<float>(in.imm0);
      stream<3>(mem, in.dst, {&in.a, &in.b, &in.c},
                [&](float* out, const std::array<Chunk, 3>& x, int64_t n) {
                  // tensor_copy_predicated: a scalar source (no b) and the reversed predicate.
                  const Chunk t = in.b.valid() ? x[1] : Chunk{&v, 0};
                  const Chunk f = x[2], pred = x[0];
                  for (int64_t e = 0; e < n; ++e) {
                    out[e] = ((pred.p[e * pred.step] != 0) != in.negate) ? t.p[e * t.step]
                                                                          : f.p[e * f.step];
                  }
                });
      return true;
    }
    default: return false;
  }
}

// Values read and written as integers (indices, counts): exact beyond float's 2^24.
void store_ints(const Storage& mem, const View& v, const std::vector<int64_t>& in) {
  const DType dt = mem.of(v);
  if (dtype_is_float(dt)) {
    std::vector<float> f(in.begin(), in.end());
    scatter(mem, v, f.data());
    return;
  }
  const auto size = static_cast<int64_t>(dtype_size(dt));
  uint8_t* base = mem.base[v.buffer];
  size_t k = 0;
  for_each_run(v, [&](int64_t off, int64_t n, int64_t stride) {
    for (int64_t i = 0; i < n; ++i, ++k) {
      const int64_t x = in[k];
      uint8_t* p = base + (off + i * stride) * size;
      switch (dt) {
        case DType::kInt32:
        case DType::kUInt32: {
          const auto w = static_cast<uint32_t>(x);
          std::memcpy(p, &w, 4);
          break;
        }
        case DType::kInt16:
        case DType::kUInt16: {
          const auto w = static_cast<uint16_t>(x);
          std::memcpy(p, &w, 2);
          break;
        }
        default: *p = static_cast<uint8_t>(x); break;
      }
    }
  });
}

// The per-partition fold of an instruction's result into the engine's accumulators (e) under
// reduce_cmd, and the accumulated value out to d (negated with `negate`).
void reduce_into(const Storage& mem, const Instruction& in, const std::vector<float>& x) {
  if (in.alu2 == Alu::kBypass || !in.e.valid()) return;
  Reduction red = reduce_start(mem, in, static_cast<int64_t>(x.size()));
  reduce_fold(red, in.alu2, x.data(), 0, static_cast<int64_t>(x.size()));
  reduce_finish(mem, in, red);
}

void check_view(const Program& p, size_t index, const View& v, const char* role) {
  if (!v.valid()) return;
  if (v.buffer >= static_cast<int32_t>(p.buffers.size())) {
    fail(p, index, std::string(role) + " names buffer " + std::to_string(v.buffer) +
                       " of " + std::to_string(p.buffers.size()));
  }
  if (v.ndim < 0 || v.ndim > kMaxDims) fail(p, index, std::string(role) + " has a bad rank");
  if (v.numel() == 0) return;
  const Buffer& buf = p.buffers[v.buffer];
  const int64_t bytes = buf.elements * static_cast<int64_t>(dtype_size(buf.dtype));
  const auto size = static_cast<int64_t>(
      dtype_size(v.dtype >= 0 ? static_cast<DType>(v.dtype) : buf.dtype));
  if (v.lowest() < 0 || v.end() * size > bytes) {
    std::ostringstream os;
    os << role << " reaches bytes [" << v.lowest() * size << ", " << v.end() * size
       << ") of a buffer of " << bytes;
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


// Calls f(e, imm0 + p * imm1 + sum over the free dims d of pattern[d] * i_d) for the first n
// elements e of dst in view order, (p, i_1, ...) being element e's index (iota, affine_select).
template <class F>
void for_each_affine(const Instruction& in, size_t n, F&& f) {
  std::array<int64_t, kMaxDims> idx{};
  for (size_t e = 0; e < n; ++e) {
    double v = in.imm0 + static_cast<double>(idx[0]) * in.imm1;
    for (int d = 1; d < in.dst.ndim; ++d) v += static_cast<double>(in.pattern[d] * idx[d]);
    f(e, v);
    for (int d = in.dst.ndim - 1; d >= 0; --d) {
      if (++idx[d] < in.dst.shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Per-partition access to a view: its elements in view order, partition by partition.
int64_t parts_of(const View& v) { return v.ndim > 0 ? v.shape[0] : 1; }

void run_selection(const Storage& mem, const Program& p, size_t i, const Instruction& in);
// An index tile's values as exact integers (Selection.inc).
std::vector<int64_t> load_ints(const Storage& mem, const View& v);

// The instructions beyond the basic arithmetic: scans, cross-partition reductions, statistics,
// top-8 search, MX quantisation and MX matmul.
void run_extended(const Storage& mem, const Program& p, size_t i, const Instruction& in) {
  switch (in.op) {
    case Opcode::kScan: {
      const Floats x(mem, in.a);
      const Floats y(mem, in.b);
      // The initial values are copied: the destination may overlap them.
      std::vector<float> init;
      if (in.c.valid()) init = load(mem, in.c);
      const int64_t parts = parts_of(in.dst);
      const int64_t per = parts ? static_cast<int64_t>(x.size()) / parts : 0;
      // Into the destination's memory where it is one contiguous FP32 stretch that shares no
      // memory with an operand other than as the very same view.
      auto apart = [&](const View& v) { return v.buffer != in.dst.buffer || same_view(v, in.dst); };
      const bool direct = mem.distinct && mem.of(in.dst) == DType::kFloat32 &&
                          is_dense(in.dst) && apart(in.a) && apart(in.b);
      std::vector<float> staged;
      float* out = reinterpret_cast<float*>(mem.base[in.dst.buffer]) + in.dst.offset;
      if (!direct) {
        staged.resize(x.size());
        out = staged.data();
      }
      scan_partitions(in.alu0, in.alu1, in.reverse0, in.reverse1, x.data(), y.data(),
                      init.empty() ? nullptr : init.data(), static_cast<float>(in.imm2), parts,
                      per, out);
      if (!direct) scatter(mem, in.dst, out);
      break;
    }
    case Opcode::kPartitionReduce: {
      const std::vector<float> x = load(mem, in.a);
      const int64_t parts = parts_of(in.a);
      const int64_t per = parts ? static_cast<int64_t>(x.size()) / parts : 0;
      std::vector<float> out(static_cast<size_t>(per), reduce_identity(in.alu0));
      for (int64_t q = 0; q < parts; ++q) {
        for (int64_t k = 0; k < per; ++k) {
          out[k] = apply_alu(in.alu0, out[k], x[static_cast<size_t>(q * per + k)]);
        }
      }
      if (in.axes & 1u) {
        for (float& v : out) v /= static_cast<float>(parts);
      }
      scatter(mem, in.dst, out.data());
      break;
    }
    case Opcode::kAffineSelect: {
      std::vector<float> x = load(mem, in.a);
      for_each_affine(in, x.size(), [&](size_t e, double v) {
        if (apply_alu(in.alu0, static_cast<float>(v), 0.0f) == 0.0f) x[e] = static_cast<float>(in.imm2);
      });
      scatter(mem, in.dst, x.data());
      break;
    }
    case Opcode::kBnStats: {
      // Per partition: count, mean and sum of squared deviations (variance * count) of the
      // elements at even and at odd positions of the free dims, in FP32 (two-pass: mean, then
      // deviations, as an accurate statistic needs).
      const std::vector<float> x = load(mem, in.a);
      const int64_t parts = parts_of(in.a);
      const int64_t per = parts ? static_cast<int64_t>(x.size()) / parts : 0;
      std::vector<float> out(static_cast<size_t>(parts * 6));
      for (int64_t q = 0; q < parts; ++q) {
        const float* row = x.data() + q * per;
        for (int par = 0; par < 2; ++par) {
          int64_t n = 0;
          float sum = 0;
          for (int64_t k = par; k < per; k += 2, ++n) sum += row[k];
          const float mean = n ? sum / static_cast<float>(n) : 0.0f;
          float m2 = 0;
          for (int64_t k = par; k < per; k += 2) m2 += (row[k] - mean) * (row[k] - mean);
          float* o = out.data() + q * 6 + par * 3;
          o[0] = static_cast<float>(n);
          o[1] = mean;
          o[2] = m2;
        }
      }
      scatter(mem, in.dst, out.data());
      break;
    }
    case Opcode::kBnAggr: {
      // Chan et al.'s parallel combination of (count, mean, M2) triples.
      const std::vector<float> x = load(mem, in.a);
      const int64_t parts = parts_of(in.a);
      const int64_t per = parts ? static_cast<int64_t>(x.size()) / parts : 0;
      std::vector<float> out(static_cast<size_t>(parts * 2));
      for (int64_t q = 0; q < parts; ++q) {
        float n = 0, mean = 0, m2 = 0;
        for (int64_t t = 0; t + 3 <= per; t += 3) {
          const float* tr = x.data() + q * per + t;
          const float nb = tr[0];
          if (nb <= 0) continue;
          const float total = n + nb;
          const float delta = tr[1] - mean;
          mean += delta * nb / total;
          m2 += tr[2] + delta * delta * n * nb / total;
          n = total;
        }
        out[static_cast<size_t>(q * 2)] = mean;
        out[static_cast<size_t>(q * 2 + 1)] = n > 0 ? m2 / n : 0.0f;
      }
      scatter(mem, in.dst, out.data());
      break;
    }
    case Opcode::kMax8: {
      const Floats x(mem, in.a);
      const int64_t parts = parts_of(in.a);
      const int64_t per = parts ? static_cast<int64_t>(x.size()) / parts : 0;
      std::vector<float> out(static_cast<size_t>(parts * 8));
      for (int64_t q = 0; q < parts; ++q) {
        std::vector<float> row(x.begin() + q * per, x.begin() + (q + 1) * per);
        std::partial_sort(row.begin(), row.begin() + 8, row.end(), std::greater<float>());
        std::copy(row.begin(), row.begin() + 8, out.begin() + q * 8);
      }
      scatter(mem, in.dst, out.data());
      break;
    }
    case Opcode::kFindIndex8:
    case Opcode::kMatchReplace8: {
      const bool replace = in.op == Opcode::kMatchReplace8;
      // nc_match_replace8 rewrites its copy of the data; nc_find_index8 reads it in place.
      std::vector<float> copy;
      if (replace) copy = load(mem, in.a);
      const Floats data = replace ? Floats() : Floats(mem, in.a);
      float* x = replace ? copy.data() : nullptr;
      const float* xr = replace ? copy.data() : data.data();
      const auto size = replace ? copy.size() : data.size();
      const Floats vals(mem, in.b);
      const int64_t parts = parts_of(in.a);
      const int64_t per = parts ? static_cast<int64_t>(size) / parts : 0;
      const DType idx_type = in.op == Opcode::kFindIndex8 ? mem.of(in.dst)
                                                          : (in.d.valid() ? mem.of(in.d) : DType::kUInt32);
      const int64_t none = dtype_size(idx_type) == 2 ? 0xffff : 0xffffffffLL;
      std::vector<int64_t> idx(static_cast<size_t>(parts * 8), none);
      for (int64_t q = 0; q < parts; ++q) {
        const float* row = xr + q * per;
        // nc_find_index8 pairs duplicate values with matches in ascending order; nc_match_replace8
        // walks the values from the last to the first. Value j (in that order) takes the first
        // element equal to it that no earlier value took: one pass over the row gives each
        // element to the earliest value still open that it equals, which is the same pairing.
        std::array<float, 8> want{};
        std::array<bool, 8> open{};
        for (int jj = 0; jj < 8; ++jj) {
          want[static_cast<size_t>(jj)] = vals[static_cast<size_t>(q * 8 + (replace ? 7 - jj : jj))];
          open[static_cast<size_t>(jj)] = true;
        }
        // The distinct values wanted (often one: the row's maximum broadcast 8 times), so that
        // most elements cost a compare or two.
        std::array<float, 8> distinct{};
        int n_distinct = 0;
        for (float w : want) {
          if (std::find(distinct.begin(), distinct.begin() + n_distinct, w) ==
              distinct.begin() + n_distinct) {
            distinct[static_cast<size_t>(n_distinct++)] = w;
          }
        }
        int left = 8;
        for (int64_t k = 0; k < per && left > 0; ++k) {
          k += find_first_of(row + k, per - k, distinct.data(), n_distinct);
          if (k == per) break;
          const float v = row[k];
          for (int jj = 0; jj < 8; ++jj) {
            if (open[static_cast<size_t>(jj)] && want[static_cast<size_t>(jj)] == v) {
              open[static_cast<size_t>(jj)] = false;
              --left;
              idx[static_cast<size_t>(q * 8 + (replace ? 7 - jj : jj))] = k;
              if (replace) x[q * per + k] = static_cast<float>(in.imm0);
              break;
            }
          }
        }
      }
      if (replace) {
        scatter(mem, in.dst, x);
        if (in.d.valid()) store_ints(mem, in.d, idx);
      } else {
        store_ints(mem, in.dst, idx);
      }
      break;
    }
    case Opcode::kQuantizeMx: {
      // Groups of 8 partitions x 4 values (one x4 element): scale X = 2^(floor(log2 amax) -
      // (Emax - 1)) (the documented choice, twice OCP's sample scale), 2^-127 for an all-zero
      // group; values src / X rounded to nearest even. The scale of group (partition block b,
      // element j) goes to partition (b / 4) * 32 + b % 4 of the scale tile, column j.
      const DType packed = mem.of(in.dst);
      const int emax = packed == DType::kFloat8E4M3Fnx4 ? 8 : 15;
      const std::vector<float> x = load(mem, in.a);
      const int64_t parts = parts_of(in.a);
      const int64_t per = parts ? static_cast<int64_t>(x.size()) / parts : 0;  // values
      const int64_t packs = per / 4;
      std::vector<int64_t> words(static_cast<size_t>(parts * packs));  // exact 32-bit packs
      const int64_t scale_parts = parts_of(in.d);
      const int64_t scale_cols = scale_parts ? in.d.numel() / scale_parts : 0;
      // Scale bytes (uint8 or float8_e8m0fnu: the biased exponent either way); partitions the
      // groups do not use keep theirs.
      std::vector<uint8_t> scales = load_raw(mem, in.d);
      for (int64_t b = 0; b < parts / 8; ++b) {
        for (int64_t j = 0; j < packs; ++j) {
          float amax = 0;
          for (int64_t r = 0; r < 8; ++r) {
            for (int64_t t = 0; t < 4; ++t) {
              amax = std::max(amax, std::fabs(x[static_cast<size_t>((b * 8 + r) * per + j * 4 + t)]));
            }
          }
          int e = -127;
          if (amax > 0 && std::isfinite(amax)) {
            int ex = 0;
            std::frexp(amax, &ex);
            e = std::clamp(ex - 1 - (emax - 1), -127, 127);
          }
          const float scale = std::ldexp(1.0f, e);
          for (int64_t r = 0; r < 8; ++r) {
            uint32_t word = 0;
            for (int64_t t = 0; t < 4; ++t) {
              const float v = x[static_cast<size_t>((b * 8 + r) * per + j * 4 + t)] / scale;
              word |= mx_value_encode(packed, v) << (8 * t);
            }
            words[static_cast<size_t>((b * 8 + r) * packs + j)] = word;
          }
          const int64_t sp = (b / 4) * 32 + b % 4;
          if (sp >= scale_parts || j >= scale_cols) {
            throw Error(ErrorCode::kInvalidArgument, "quantize_mx: the scale tile is too small");
          }
          scales[static_cast<size_t>(sp * scale_cols + j)] = static_cast<uint8_t>(e + 127);
        }
      }
      // The packs are bit patterns: store them as integers of the pack's width.
      View raw = in.dst;
      raw.dtype = static_cast<int32_t>(DType::kUInt32);
      store_ints(mem, raw, words);
      store_raw(mem, in.d, scales.data());
      break;
    }
    case Opcode::kDmaIndirect: {
      // One row per partition, at the row its index names: every index is checked before any
      // row moves, so a bad one leaves the destination as it was.
      const bool scatter_rows = (in.axes & 1u) != 0;
      const View& indexed = scatter_rows ? in.dst : in.a;
      const View& dense = scatter_rows ? in.a : in.dst;
      const std::vector<int64_t> rows = load_ints(mem, in.b);
      const int64_t n = indexed.shape[0];
      // oob_mode.skip (axes bit 1): an index outside [0, imm0) (the tracer gives the indices
      // the bounds check below accepts) moves nothing.
      const bool skip = (in.axes & 2u) != 0;
      const int64_t dim_size = static_cast<int64_t>(in.imm0);
      auto skipped = [&](int64_t r) { return skip && (r < 0 || r >= dim_size); };
      for (size_t q = 0; q < rows.size(); ++q) {
        if (skipped(rows[q])) continue;
        if (rows[q] < 0 || rows[q] >= n) {
          fail(p, i, "index " + std::to_string(rows[q]) + " at partition " + std::to_string(q) +
                         " of the index tile is outside [0, " + std::to_string(n) + ") of the " +
                         (scatter_rows ? "destination's" : "source's") +
                         " indexed dim (the DMA engines' bounds check raises this on a device "
                         "too; mask the partitions whose indices are not valid)");
        }
      }
      // axes bit 3: dma_compute's read-modify-write, the moved row added to what its destination
      // holds (FP32, as the DMA engines sum). A scatter's indices must then be distinct (AWS
      // refuses unique_indices=False); a repeat is an error, not a race's unknown result.
      const bool add = (in.axes & 8u) != 0;
      if (add && scatter_rows) {
        std::vector<int64_t> seen;
        for (int64_t r : rows) {
          if (!skipped(r)) seen.push_back(r);
        }
        std::sort(seen.begin(), seen.end());
        auto twice = std::adjacent_find(seen.begin(), seen.end());
        if (twice != seen.end()) {
          fail(p, i, "dma_compute: index " + std::to_string(*twice) +
                         " appears more than once in the index tile of a scatter read-modify-"
                         "write; AWS's dma_compute takes unique indices only (unique_indices="
                         "True), so repeated rows have no defined sum");
        }
      }
      const bool same = !add && mem.of(in.a) == mem.of(in.dst);
      // One index per partition of the tile (a vector offset), or one for the whole tile (a
      // scalar offset): each index moves dense.shape[0] / rows.size() partitions.
      const int64_t per = rows.empty() ? 0 : dense.shape[0] / static_cast<int64_t>(rows.size());
      for (size_t q = 0; q < rows.size(); ++q) {
        if (skipped(rows[q])) continue;
        View far = indexed, near = dense;
        far.offset += rows[q] * indexed.stride[0];
        far.shape[0] = 1;
        near.offset += static_cast<int64_t>(q) * per * dense.stride[0];
        near.shape[0] = per;
        const View& src = scatter_rows ? near : far;
        const View& dst = scatter_rows ? far : near;
        if (same) {
          copy_raw(mem, src, dst);
        } else {
          std::vector<float> x = load(mem, src);
          if (add) {
            const std::vector<float> held = load(mem, dst);
            for (size_t k = 0; k < x.size(); ++k) x[k] += held[k];
          }
          scatter(mem, dst, x.data());
        }
      }
      break;
    }
    case Opcode::kTensorIndirect: {
      // Every offset is checked before any element moves: a bad one leaves the data as it was.
      const bool scatter_cols = (in.axes & 1u) != 0;
      const View& data = scatter_cols ? in.dst : in.a;
      const View& dense = scatter_cols ? in.a : in.dst;
      const std::vector<int64_t> index = load_ints(mem, in.b);
      const int64_t parts = dense.shape[0], n = dense.free_size(), k = in.b.free_size();
      const int64_t cols = data.free_size(), group = static_cast<int64_t>(in.imm0);
      std::vector<int64_t> offsets(static_cast<size_t>(parts * n));
      for (int64_t q = 0; q < parts; ++q) {
        for (int64_t e = 0; e < n; ++e) {
          const int64_t row = q / group * group + e % group, col = e / group;
          const int64_t off = index[static_cast<size_t>(row * k + col)];
          if (off < 0 || off >= cols) {
            fail(p, i, "tensor indirection: offset " + std::to_string(off) + " (index row " +
                           std::to_string(row) + ", column " + std::to_string(col) +
                           ", element " + std::to_string(e) + " of partition " +
                           std::to_string(q) + ") is outside the data tensor's " +
                           std::to_string(cols) + " elements per partition");
          }
          offsets[static_cast<size_t>(q * n + e)] = off;
        }
      }
      // The elements' bytes, in partition then element order (as the one-element copies below,
      // so views that share memory give the same result), through a table of each view's
      // element offsets per partition: the data's free dims flattened (an offset counts
      // elements in its view order).
      const auto size = static_cast<int64_t>(dtype_size(mem.of(data)));
      if (size == static_cast<int64_t>(dtype_size(mem.of(dense)))) {
        auto free_offsets = [](const View& v) {
          std::vector<int64_t> at(static_cast<size_t>(v.free_size()));
          for (size_t f = 0; f < at.size(); ++f) {
            int64_t rest = static_cast<int64_t>(f), off = 0;
            for (int d = v.ndim - 1; d >= 1; --d) {
              off += (rest % v.shape[d]) * v.stride[d];
              rest /= v.shape[d];
            }
            at[f] = off;
          }
          return at;
        };
        const std::vector<int64_t> data_at = free_offsets(data), dense_at = free_offsets(dense);
        uint8_t* data_base = mem.base[data.buffer];
        uint8_t* dense_base = mem.base[dense.buffer];
        for (int64_t q = 0; q < parts; ++q) {
          const int64_t data_row = data.offset + q * data.stride[0];
          const int64_t dense_row = dense.offset + q * dense.stride[0];
          for (int64_t e = 0; e < n; ++e) {
            const int64_t off = offsets[static_cast<size_t>(q * n + e)];
            uint8_t* at_data = data_base + (data_row + data_at[static_cast<size_t>(off)]) * size;
            uint8_t* at_dense = dense_base + (dense_row + dense_at[static_cast<size_t>(e)]) * size;
            if (scatter_cols) {
              std::memmove(at_data, at_dense, static_cast<size_t>(size));
            } else {
              std::memmove(at_dense, at_data, static_cast<size_t>(size));
            }
          }
        }
        break;
      }
      // Elements of different widths: one at a time, through views of one element.
      auto element = [](const View& v, int64_t q, int64_t f) {
        View one = v;
        one.offset += q * v.stride[0];
        for (int d = v.ndim - 1; d >= 1; --d) {
          one.offset += (f % v.shape[d]) * v.stride[d];
          f /= v.shape[d];
        }
        for (int d = 0; d < v.ndim; ++d) one.shape[d] = 1;
        return one;
      };
      for (int64_t q = 0; q < parts; ++q) {
        for (int64_t e = 0; e < n; ++e) {
          const int64_t off = offsets[static_cast<size_t>(q * n + e)];
          if (scatter_cols) {
            copy_raw(mem, element(dense, q, e), element(data, q, off));
          } else {
            copy_raw(mem, element(data, q, off), element(dense, q, e));
          }
        }
      }
      break;
    }
    case Opcode::kMatmulMx: {
      // Dequantise both operands (value x 2^(scale - 127); scale of partition k at scale-tile
      // partition (k / 32) * 32 + (k % 32) / 8) into FP32 [4K, M] / [4K, N] and multiply them.
      auto dequant = [&](const View& data, const View& scale, int64_t& k, int64_t& cols) {
        const DType packed = mem.of(data);
        const std::vector<uint8_t> raw = load_raw(mem, data);
        k = parts_of(data);
        cols = k ? data.numel() / k : 0;
        const std::vector<float> sc = load(mem, scale);  // 2^(b-127) for float8_e8m0fnu
        const DType st = mem.of(scale);
        const int64_t scols = parts_of(scale) ? scale.numel() / parts_of(scale) : 0;
        std::vector<float> out(static_cast<size_t>(k * 4 * cols));
        const size_t width = dtype_size(packed);
        for (int64_t r = 0; r < k; ++r) {
          const int64_t srow = (r / 32) * 32 + (r % 32) / 8;
          for (int64_t c = 0; c < cols; ++c) {
            float s = sc[static_cast<size_t>(srow * scols + c)];
            if (st == DType::kUInt8) s = e8m0_decode(static_cast<uint8_t>(s));
            uint32_t word = 0;
            std::memcpy(&word, raw.data() + (r * cols + c) * static_cast<int64_t>(width), width);
            for (int t = 0; t < 4; ++t) {
              const uint32_t code = width == 4 ? (word >> (8 * t)) & 0xffu : (word >> (4 * t)) & 0xfu;
              // Contraction index (r, t): row 4r + t of the unpacked operand.
              out[static_cast<size_t>((r * 4 + t) * cols + c)] = mx_value_decode(packed, code) * s;
            }
          }
        }
        return out;
      };
      int64_t k = 0, m = 0, k2 = 0, n = 0;
      const std::vector<float> s = dequant(in.a, in.c, k, m);
      const std::vector<float> mv = dequant(in.b, in.d, k2, n);
      std::vector<float> out(static_cast<size_t>(m * n), 0.0f);
      if (in.accumulate) gather(mem, in.dst, out.data());
      g_matmul.load()(m, n, k * 4, s.data(), m, mv.data(), n, out.data(), in.accumulate);
      scatter(mem, in.dst, out.data());
      break;
    }
    default: run_selection(mem, p, i, in); break;
  }
}

// Instruction i of p, or `in`: a partition range of it (run_split).
void execute(const Storage& mem, const Program& p, size_t i, const Instruction& in,
             MatmulKernel matmul, std::vector<std::string>& printed) {
  if ((in.op == Opcode::kDmaCopy || in.op == Opcode::kTensorCopy) &&
      mem.of(in.a) == mem.of(in.dst)) {
    copy_raw(mem, in.a, in.dst);
    return;
  }
  if (run_streamed(mem, in)) return;
  switch (in.op) {
    case Opcode::kDmaCopy:
    case Opcode::kTensorCopy: {
      std::vector<float> x = load(mem, in.a);
      scatter(mem, in.dst, x.data());
      break;
    }
    case Opcode::kTensorTensor: {
      std::vector<float> x = load(mem, in.a);
      const Floats y(mem, in.b);
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
      reduce_into(mem, in, x);
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
      // exponential's max_value is subtracted (reverse0); activation's bias is added.
      const Alu bias_op = in.reverse0 ? Alu::kSubtract : Alu::kAdd;
      const auto b1 = static_cast<float>(in.imm1);
      if (!bias.empty()) {
        apply_alu_array(bias_op, x.data(), bias.data(), 1, x.size(), false);
      } else if (b1 != 0.0f) {
        apply_alu_array(bias_op, x.data(), &b1, 0, x.size(), false);
      }
      switch (in.act) {
        case Act::kCopy: break;
        case Act::kExp:
          for (float& v : x) v = std::exp(v);
          break;
        default:
          for (float& v : x) v = apply_act(in.act, v);
          break;
      }
      reduce_into(mem, in, x);
      scatter(mem, in.dst, x.data());
      break;
    }
    case Opcode::kTensorReduce: {
      const Floats x(mem, in.a);
      // Strides of the result over a's dims: 0 for reduced dims.
      std::array<int64_t, kMaxDims> ostride{};
      int64_t out_n = 1;
      for (int d = in.a.ndim - 1; d >= 0; --d) {
        if (in.axes & (1u << d)) continue;
        ostride[d] = out_n;
        out_n *= in.a.shape[d];
      }
      std::vector<float> out(static_cast<size_t>(out_n), reduce_identity(in.alu0));
      // Reduced axes that are the trailing ones (the common case): each result folds one
      // contiguous stretch of x, in the same order as the general walk below.
      int first_reduced = in.a.ndim;
      while (first_reduced > 0 && (in.axes & (1u << (first_reduced - 1)))) --first_reduced;
      const bool trailing = first_reduced < in.a.ndim &&
                            (in.axes & ((1u << first_reduced) - 1u)) == 0;
      if (trailing && out_n > 0) {
        const auto inner = static_cast<int64_t>(x.size()) / out_n;
        reduce_rows(in.alu0, x.data(), out_n, inner, out.data());
      } else {
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
      // FP8 double-row mode (axes bit 0): operands [K, 2, M] and [K, 2, N] contract over
      // (k, r), a K = 2K matmul whose rows are the operands' rows in view order.
      const int64_t pair = (in.axes & 1u) != 0 ? 2 : 1;
      const int64_t k = in.a.shape[0] * pair;
      const int64_t m = in.a.free_size() / pair;
      const int64_t n = in.b.free_size() / pair;
      // A large product is two GEMMs, each on half the result's rows (the destination's
      // partitions), at every thread count, so that the values do not depend on it; with
      // several threads the halves run on two. (The loop's sums do not depend on M; the lent
      // GEMM's did not either where measured, but a BLAS may choose its method by size.)
      const bool halves = m >= 2 * kSplitMatmulRows && m * n * k >= kSplitMatmulMacs;
      const int threads = halves ? partition_threads() : 1;
      // Operands that need a copy (BF16 / FP8 tiles, strided views) are copied by each thread
      // that computes a half, into a buffer of its own, where the halves may run on two: one
      // copy made by the calling thread and read by the worker's GEMM cost more than the
      // worker's half saved (measured on flash attention: the copies' time grew 10x at two
      // threads, as each next copy had to take back from the other core the cache lines the
      // worker had read).
      const bool defer = threads > 1;
      const Rows s(mem, in.a, pair == 2, defer);
      const Rows mv(mem, in.b, pair == 2, defer);
      const int64_t s_step = pair == 2 ? m : s.step(), mv_step = pair == 2 ? n : mv.step();
      // Into the destination's own memory where it is one dense FP32 stretch apart from the
      // operands (a PSUM tile, as a rule), else through a staged copy.
      const bool direct = mem.distinct && mem.of(in.dst) == DType::kFloat32 &&
                          is_dense(in.dst) && in.dst.buffer != in.a.buffer &&
                          in.dst.buffer != in.b.buffer;
      std::vector<float> staged;
      float* out = reinterpret_cast<float*>(mem.base[in.dst.buffer]) + in.dst.offset;
      if (!direct) {
        staged.resize(static_cast<size_t>(m * n));
        if (in.accumulate) gather(mem, in.dst, staged.data());
        out = staged.data();
      }
      // A small product costs less in the loop than the lent GEMM's call (tensor set-up and
      // dispatch, several microseconds): both accumulate in FP32.
      const MatmulKernel kernel = m * n * k <= kSmallMatmulMacs ? &loop_matmul : matmul;
      if (halves) {
        const int64_t half = (m / 2 + kSplitMatmulRows - 1) / kSplitMatmulRows * kSplitMatmulRows;
        // This thread's operands for this instruction (copied once where a thread computes
        // both halves).
        const uint64_t tag = g_matmul_tag.fetch_add(1, std::memory_order_relaxed) + 1;
        const auto operands = [&]() -> std::pair<const float*, const float*> {
          if (!defer) return {s.data(), mv.data()};
          MatmulCopies& own = t_matmul_copies;
          if (own.tag != tag) {
            own.release_large();  // a worker's large copies from its previous matmul
            own.s = s.in_place() ? s.data() : Rows::stage(mem, in.a, own.s_buffer);
            own.mv = mv.in_place() ? mv.data() : Rows::stage(mem, in.b, own.mv_buffer);
            own.tag = tag;
          }
          return {own.s, own.mv};
        };
        std::exception_ptr errors[2];
        const auto run_half = [&](int r) {
          const int64_t lo = r == 0 ? 0 : half, rows = r == 0 ? half : m - half;
          try {
            const auto [sp, mp] = operands();
            kernel(rows, n, k, sp + lo, s_step, mp, mv_step, out + lo * n, in.accumulate);
          } catch (...) {
            errors[r] = std::current_exception();
          }
        };
        // Where the GEMM gives the whole product's bits in halves too (probed once per shape),
        // a product the workers do not share is one GEMM: two cost up to 35 % more on one
        // thread. Otherwise it is two halves at every thread count, as the values must not
        // depend on the count.
        const bool automatic = partition_threads_automatic();
        if (halves_match_whole(kernel, m, n, k, half, s.misalignment(), s_step,
                               mv.misalignment(), mv_step, misalign(out), in.accumulate)) {
          if (try_run_on_workers(2, threads, run_half, automatic)) {
            count_split_instruction();
          } else {
            const auto [sp, mp] = operands();
            kernel(m, n, k, sp, s_step, mp, mv_step, out, in.accumulate);
          }
        } else if (try_run_on_workers(2, threads, run_half, automatic)) {
          count_split_instruction();
        } else {
          run_half(0);
          run_half(1);
        }
        t_matmul_copies.release_large();
        for (const std::exception_ptr& e : errors) {
          if (e) std::rethrow_exception(e);
        }
      } else {
        kernel(m, n, k, s.data(), s_step, mv.data(), mv_step, out, in.accumulate);
      }
      if (!direct) scatter(mem, in.dst, out);
      break;
    }
    case Opcode::kTranspose: {
      const int64_t rows = in.a.shape[0];
      const int64_t cols = in.a.free_size();
      if (transpose_direct(mem, in, rows, cols)) break;
      const Floats x(mem, in.a);
      std::vector<float> t(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
      }
      scatter(mem, in.dst, t.data());
      break;
    }
    case Opcode::kIota: {
      std::vector<float> out(static_cast<size_t>(in.dst.numel()));
      for_each_affine(in, out.size(), [&](size_t e, double v) { out[e] = static_cast<float>(v); });
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
      std::vector<float> x = in.b.valid() ? load(mem, in.b) : std::vector<float>{};
      const std::vector<float> y = load(mem, in.c);
      // tensor_copy_predicated: a scalar source (no b) and the reversed predicate (negate).
      if (x.empty()) x.assign(y.size(), static_cast<float>(in.imm0));
      for (size_t e = 0; e < x.size(); ++e) x[e] = ((pred[e] != 0) != in.negate) ? x[e] : y[e];
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
    case Opcode::kBarrier:
      // The tracer orders the instructions so that every core's instructions before a barrier
      // run before any core's after it: nothing is left to do here.
      break;
    case Opcode::kCollective: run_collective(p, i, mem.base, mem.collectives); break;
    default: run_extended(mem, p, i, in); break;
  }
}

// Splitting an instruction over partition ranges (PartitionWorkers.h). A range of at least
// this many elements (of the instruction's largest view) goes to each thread: below it, waking
// a worker and waiting for it costs more than the range's work (measured in docs/nki.md,
// "Instructions over several threads").
constexpr int64_t kSplitMinElements = 16384;

// Whether `op` computes each partition of its destination from the same partition of its
// operands alone (dim 0 of every view), so that partition ranges of it are independent.
bool partitions_independent(const Instruction& in) {
  switch (in.op) {
    case Opcode::kDmaCopy:
    case Opcode::kTensorCopy:
    case Opcode::kTensorTensor:
    case Opcode::kTensorScalar:
    case Opcode::kActivation:
    case Opcode::kMemset:
    case Opcode::kSelect:
    case Opcode::kScan:
    case Opcode::kBnStats:
    case Opcode::kBnAggr:
    case Opcode::kMax8:
    case Opcode::kFindIndex8:
    case Opcode::kMatchReplace8:
      return true;
    case Opcode::kTensorReduce: return (in.axes & 1u) == 0;  // not across partitions
    default: return false;  // matmul, transpose, iota, partition reduce, affine select, MX, print
  }
}

// The partition rows of a written view must not share memory with each other. Sufficient: no two
// elements of the view share memory, which holds where, with the dims ordered by step, each step
// is larger than the farthest offset the smaller-step dims reach (a store of a [P, T, D] tile
// into a [T, P, D] tensor, partitions interleaved with the other dims); or a partition step at
// least the extent of one partition's elements.
bool rows_apart(const View& v) {
  int64_t extent = 1;
  for (int d = 1; d < v.ndim; ++d) extent += (v.shape[d] - 1) * std::abs(v.stride[d]);
  if (std::abs(v.stride[0]) >= extent) return true;
  std::array<std::pair<int64_t, int64_t>, kMaxDims> dims{};  // (step, size) of dims of size > 1
  int n = 0;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[d] > 1) dims[static_cast<size_t>(n++)] = {std::abs(v.stride[d]), v.shape[d]};
  }
  std::sort(dims.begin(), dims.begin() + n);
  int64_t reach = 0;  // the farthest offset the dims before reach
  for (int k = 0; k < n; ++k) {
    if (dims[static_cast<size_t>(k)].first <= reach) return false;
    reach += (dims[static_cast<size_t>(k)].second - 1) * dims[static_cast<size_t>(k)].first;
  }
  return true;
}

// Runs `in` as partition ranges on the partition workers when it is large enough and its
// partitions are independent: every view has the destination's partition count as dim 0 (the
// accumulators e at least as many), the written views' partitions are apart, and no view shares
// memory with a written view except an operand that is the destination's very view (each
// partition then reads only what its own range writes). Each range runs the instruction's own
// code (execute) on views narrowed to its partitions, so every element is computed as on one
// thread. False where it does not split: the caller runs it whole.
bool run_split(const Storage& mem, const Program& p, size_t i, const Instruction& in,
               int threads) {
  if (!mem.distinct || !in.dst.valid() || in.dst.ndim < 1) return false;
  const int64_t parts = in.dst.shape[0];
  if (parts < 2) return false;
  View Instruction::*const fields[] = {&Instruction::dst, &Instruction::a, &Instruction::b,
                                       &Instruction::c,   &Instruction::d, &Instruction::e,
                                       &Instruction::f};
  // Most instructions are too small to split: that first, before the checks below (a kernel of
  // thousands of small instructions, such as depthwise_conv1d's 4,620, pays them on each).
  {
    int64_t most = 0;
    for (View Instruction::*field : fields) {
      if ((in.*field).valid()) most = std::max(most, (in.*field).numel());
    }
    if (most / kSplitMinElements < 2) return false;
  }
  if (!partitions_independent(in)) return false;
  // dst, d and e are written (d: a reduction's result or match_replace8's indices; e: the
  // accumulators, also read).
  auto written = [](View Instruction::*field) {
    return field == &Instruction::dst || field == &Instruction::d || field == &Instruction::e;
  };
  int64_t largest = 0;
  for (View Instruction::*field : fields) {
    const View& v = in.*field;
    if (!v.valid()) continue;
    if (v.ndim < 1) return false;
    if (field == &Instruction::e ? v.shape[0] < parts : v.shape[0] != parts) return false;
    largest = std::max(largest, v.numel());
    if (!written(field)) continue;
    if (!rows_apart(v)) return false;
    for (View Instruction::*other : fields) {
      const View& o = in.*other;
      if (other == field || !o.valid() || o.buffer != v.buffer) continue;
      const bool operand = !written(other);
      if (!(field == &Instruction::dst && operand && same_view(o, v))) return false;
    }
  }
  if (in.op == Opcode::kTensorReduce) {  // a wrong destination size is the whole's error
    int64_t kept = 1;
    for (int d = 0; d < in.a.ndim; ++d) {
      if (!(in.axes & (1u << d))) kept *= in.a.shape[d];
    }
    if (kept != in.dst.numel()) return false;
  }
  // Up to four ranges per thread: a worker that loses its core in the middle of a range holds
  // up the instruction by that range only, and one that wakes late finds less left to share.
  // Each range is whole blocks of 16 partitions where there are enough (the blocks that scans
  // advance together).
  const int64_t ranges =
      std::min<int64_t>({4 * static_cast<int64_t>(threads), parts, largest / kSplitMinElements});
  if (ranges < 2) return false;
  const int n = static_cast<int>(ranges);
  const int64_t unit = parts >= 16 * ranges ? 16 : 1;
  const int64_t units = (parts + unit - 1) / unit;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  MatmulKernel matmul = g_matmul.load();
  // Where no worker would take a range (the workers busy, or the automatic count finding no
  // core free), the instruction runs whole, as on one thread, and does not count as split.
  const bool shared = try_run_on_workers(n, threads, [&](int r) {
    const int64_t lo = std::min(parts, unit * (units * r / n));
    const int64_t hi = std::min(parts, unit * (units * (r + 1) / n));
    Instruction part = in;
    for (View Instruction::*field : fields) {
      View& v = part.*field;
      if (!v.valid()) continue;
      v.offset += lo * v.stride[0];
      v.shape[0] = hi - lo;
    }
    try {
      std::vector<std::string> printed;  // no splittable instruction prints
      execute(mem, p, i, part, matmul, printed);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
    }
  }, partition_threads_automatic());
  if (!shared) return false;
  count_split_instruction();
  // The first range's error, as one thread would have met it first.
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return true;
}

#include "runtime/nki/Selection.inc"

}  // namespace

// Whether instruction i, the first to use kernel buffer b, writes every byte of b before anything
// reads it: b appears only as its destination, densely and whole, and the instruction writes its
// whole destination without reading it. Then poisoning b first would be overwritten unseen.
bool written_whole_first(const Program& p, size_t i, int32_t b) {
  const Instruction& in = p.instructions[i];
  // An operand placed at run time: where it writes is not known before the run.
  if (!in.offsets.empty()) return false;
  switch (in.op) {
    case Opcode::kDmaCopy:
    case Opcode::kTensorCopy:
    case Opcode::kTensorTensor:
    case Opcode::kTensorScalar:
    case Opcode::kActivation:
    case Opcode::kTensorReduce:
    case Opcode::kTranspose:
    case Opcode::kIota:
    case Opcode::kMemset:
    case Opcode::kSelect:
    case Opcode::kScan:
      break;
    case Opcode::kMatmul:
      if (in.accumulate) return false;
      break;
    default:
      return false;
  }
  for (const View* v : {&in.a, &in.b, &in.c, &in.d, &in.e, &in.f}) {
    if (v->valid() && v->buffer == b) return false;
  }
  const View& d = in.dst;
  if (d.buffer != b || d.offset != 0 || !is_dense(d)) return false;
  const Buffer& buf = p.buffers[static_cast<size_t>(b)];
  const DType dt = d.dtype >= 0 ? static_cast<DType>(d.dtype) : buf.dtype;
  return d.numel() * static_cast<int64_t>(dtype_size(dt)) ==
         buf.elements * static_cast<int64_t>(dtype_size(buf.dtype));
}

// Whether the program writes every byte of buffer b before it reads any: instructions in order,
// each operand view of b must lie in bytes already written, and the destinations of the
// instructions that write their whole destination without reading it add to the written bytes,
// until all of b is written. A kernel output that passes is not poisoned before the run (the
// NaN fill would be overwritten unseen; for a large output it cost as much as the kernel's own
// copies); one that does not (a read first, or bytes never written) is. Buffers over 256 MiB are
// not analysed (the byte map would be 32 MiB): they are poisoned.
bool written_before_read(const Program& p, const LoopNest& nest, int32_t b) {
  const Buffer& buf = p.buffers[static_cast<size_t>(b)];
  const int64_t bytes = buf.elements * static_cast<int64_t>(dtype_size(buf.dtype));
  if (bytes > (int64_t{1} << 28)) return false;
  std::vector<uint64_t> done(static_cast<size_t>((bytes + 63) / 64), 0);
  int64_t left = bytes;
  // Calls f(lo, hi) for each byte range of v.
  auto ranges = [&](const View& v, auto&& f) {
    const auto size = static_cast<int64_t>(dtype_size(v.dtype >= 0 ? static_cast<DType>(v.dtype)
                                                                   : buf.dtype));
    for_each_run(v, [&](int64_t off, int64_t n, int64_t stride) {
      if (stride == 1) return f(off * size, (off + n) * size);
      for (int64_t e = 0; e < n; ++e) f((off + e * stride) * size, (off + e * stride + 1) * size);
    });
  };
  auto bit = [&](int64_t i) { return (done[static_cast<size_t>(i >> 6)] >> (i & 63)) & 1u; };
  for (size_t at = 0; at < p.instructions.size(); ++at) {
    const Instruction& in = p.instructions[at];
    // An operand placed at run time may read or write any of its places: b is poisoned.
    for (const RuntimeOffset& r : in.offsets) {
      if (operand_view(in, r.operand).buffer == b || r.index.buffer == b) return false;
    }
    bool unread = true;
    for (const View* v : {&in.a, &in.b, &in.c, &in.d, &in.e, &in.f}) {
      if (!v->valid() || v->buffer != b) continue;
      ranges(*v, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi && unread; ++i) unread = bit(i);
      });
    }
    if (!unread) return false;
    if (in.dst.buffer != b) continue;
    // A device loop's body may run no time at all: what it writes is not written for sure.
    if (!nest.empty() && nest.innermost[at] >= 0) continue;
    bool whole = false;
    switch (in.op) {
      case Opcode::kDmaCopy: case Opcode::kTensorCopy: case Opcode::kTensorTensor:
      case Opcode::kTensorScalar: case Opcode::kActivation: case Opcode::kTensorReduce:
      case Opcode::kTranspose: case Opcode::kIota: case Opcode::kMemset: case Opcode::kSelect:
      case Opcode::kScan:
        whole = true;
        break;
      case Opcode::kMatmul: whole = !in.accumulate; break;
      default: break;
    }
    if (!whole) {  // reads or partly writes its destination: it must already be written
      ranges(in.dst, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi && unread; ++i) unread = bit(i);
      });
      if (!unread) return false;
      continue;
    }
    ranges(in.dst, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi;) {
        uint64_t& word = done[static_cast<size_t>(i >> 6)];
        const int64_t k = std::min<int64_t>(hi - i, 64 - (i & 63));
        const uint64_t mask = (k == 64 ? ~uint64_t{0} : ((uint64_t{1} << k) - 1)) << (i & 63);
        left -= __builtin_popcountll(mask & ~word);
        word |= mask;
        i += k;
      }
    });
    if (left == 0) return true;
  }
  return false;
}

void set_matmul_kernel(MatmulKernel kernel) { g_matmul.store(kernel ? kernel : &loop_matmul); }

namespace {

// A register operand of a loop: one integer element.
void check_register(const Program& p, size_t i, const View& v, const char* role) {
  if (!v.valid()) return;
  const DType dt = v.dtype >= 0 ? static_cast<DType>(v.dtype)
                                : p.buffers[static_cast<size_t>(v.buffer)].dtype;
  if (v.numel() != 1 || dtype_is_float(dt) || dtype_is_packed(dt)) {
    fail(p, i, std::string("a device loop's ") + role + " must be one integer (a register)");
  }
}

void check_loop_begin(const Program& p, size_t i, const Instruction& in) {
  if (in.axes > 3) fail(p, i, "a device loop is counted (axes 0) or a while loop (axes 1)");
  const bool joint = (in.axes & 2u) != 0;
  if ((in.axes & 1u) != 0) {
    if (!in.a.valid() || (joint && !in.c.valid())) {
      fail(p, i, "a while loop needs its condition register");
    }
    check_register(p, i, in.a, "condition");
    check_register(p, i, in.c, "condition");
    return;
  }
  if (!(in.imm2 >= 1) || in.imm2 != static_cast<double>(static_cast<int64_t>(in.imm2))) {
    fail(p, i, "a counted device loop's step must be a positive integer");
  }
  if (joint && (!in.a.valid() || !in.b.valid() || !in.c.valid() || !in.d.valid())) {
    fail(p, i, "a joint device loop takes both cores' bounds as registers");
  }
  check_register(p, i, in.a, "lower bound");
  check_register(p, i, in.b, "upper bound");
  check_register(p, i, in.dst, "induction register");
  check_register(p, i, in.c, "lower bound");
  check_register(p, i, in.d, "upper bound");
  check_register(p, i, in.e, "induction register");
}

// One register's value when the instruction runs.
int64_t register_value(const Storage& mem, const View& v) { return load_ints(mem, v)[0]; }

// A runtime offset's operand, index and reach: the operand at its first and its last place
// lies in its buffer.
void check_runtime_offset(const Program& p, size_t i, const RuntimeOffset& r) {
  static const char* const roles[7] = {"dst", "a", "b", "c", "d", "e", "f"};
  if (r.operand < 0 || r.operand > 6 || !operand_view(p.instructions[i], r.operand).valid()) {
    fail(p, i, "a runtime offset names an operand the instruction does not have");
  }
  check_view(p, i, r.index, "a runtime offset's index");
  const DType dt = r.index.dtype >= 0 ? static_cast<DType>(r.index.dtype)
                                      : p.buffers[static_cast<size_t>(r.index.buffer)].dtype;
  if (r.index.numel() != 1 || dtype_is_float(dt) || dtype_is_packed(dt)) {
    fail(p, i, "a runtime offset's index must be one integer (a register or a [1, 1] tile)");
  }
  if (r.count < 1) fail(p, i, "a runtime offset with no valid value");
  View last = operand_view(p.instructions[i], r.operand);
  last.offset += r.stride * (r.count - 1);
  check_view(p, i, last, roles[r.operand]);
}

// `in` with its runtime offsets placed by the values the kernel holds now (`placed`); false
// when one is outside its range under oob_mode.skip (the instruction then moves nothing). A
// value outside its range otherwise is an error at the kernel's line, before anything moves.
bool place_operands(const Storage& mem, const Program& p, size_t i, const Instruction& in,
                    Instruction& placed) {
  static const char* const roles[7] = {"destination", "first operand", "second operand",
                                       "third operand", "fourth operand", "fifth operand",
                                       "sixth operand"};
  placed = in;
  for (const RuntimeOffset& r : in.offsets) {
    const int64_t v = register_value(mem, r.index);
    if (v < 0 || v >= r.count) {
      if (r.skip) return false;
      fail(p, i, "index " + std::to_string(v) + " (the runtime offset of the " +
                     roles[r.operand] + ") is outside [0, " + std::to_string(r.count) +
                     ") of the dim it indexes: the access would leave its tensor");
    }
    operand_view(placed, r.operand).offset += v * r.stride;
  }
  return true;
}

}  // namespace

Executable::Executable(Program program) : program_(std::move(program)) {
  const Program& p = program_;
  const size_t nb = p.buffers.size();
  std::vector<int64_t> first(nb, -1), last(nb, -1);
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction& in = p.instructions[i];
    const View* views[7] = {&in.dst, &in.a, &in.b, &in.c, &in.d, &in.e, &in.f};
    const char* roles[7] = {"dst", "a", "b", "c", "d", "e", "f"};
    for (int k = 0; k < 7; ++k) {
      check_view(p, i, *views[k], roles[k]);
      if (!views[k]->valid()) continue;
      const auto b = static_cast<size_t>(views[k]->buffer);
      if (first[b] < 0) first[b] = static_cast<int64_t>(i);
      last[b] = static_cast<int64_t>(i);
    }
    for (const RuntimeOffset& r : in.offsets) {
      check_runtime_offset(p, i, r);
      const auto b = static_cast<size_t>(r.index.buffer);
      if (first[b] < 0) first[b] = static_cast<int64_t>(i);
      last[b] = static_cast<int64_t>(i);
    }
    switch (in.op) {
      case Opcode::kMatmul:
        if (!in.a.valid() || !in.b.valid() || in.a.ndim < 1 || in.b.ndim < 1 ||
            in.a.shape[0] != in.b.shape[0]) {
          fail(p, i, "stationary and moving need the same contraction (partition) size");
        }
        if ((in.axes & 1u) != 0 &&
            (in.a.free_size() % 2 != 0 || in.b.free_size() % 2 != 0 ||
             in.dst.numel() != in.a.free_size() / 2 * (in.b.free_size() / 2))) {
          fail(p, i, "a double-row matmul takes [K, 2, M] and [K, 2, N] into [M, N]");
        }
        if ((in.axes & 1u) == 0 && in.dst.numel() != in.a.free_size() * in.b.free_size()) {
          fail(p, i, "destination must hold stationary free x moving free elements");
        }
        break;
      case Opcode::kTranspose:
      case Opcode::kTensorCopy:
      case Opcode::kDmaCopy: require_same_numel(p, i, in.a, in.dst, "source"); break;
      case Opcode::kDmaIndirect: {
        const bool scatter_rows = (in.axes & 1u) != 0;
        const View& indexed = scatter_rows ? in.dst : in.a;
        const View& dense = scatter_rows ? in.a : in.dst;
        if (!in.b.valid() || !indexed.valid() || !dense.valid() || indexed.ndim < 1 ||
            dense.ndim < 1) {
          fail(p, i, "an indirect DMA needs a source, a destination and an index tile");
        }
        const int64_t k = in.b.numel();
        if (k != dense.shape[0] && k != 1) {
          fail(p, i, "the index tile holds " + std::to_string(k) + " indices for " +
                         std::to_string(dense.shape[0]) +
                         " partitions (one per partition, or one for the whole tile)");
        }
        if (indexed.free_size() * k != dense.numel()) {
          fail(p, i, "an indexed row has " + std::to_string(indexed.free_size()) +
                         " elements, the tile " + std::to_string(dense.numel()) + " for " +
                         std::to_string(k) + " indices");
        }
        const DType it = in.b.dtype >= 0 ? static_cast<DType>(in.b.dtype)
                                         : p.buffers[static_cast<size_t>(in.b.buffer)].dtype;
        if (dtype_is_float(it) || dtype_is_packed(it)) {
          fail(p, i, "the index tile must hold integers");
        }
        break;
      }
      case Opcode::kScan:
        require_same_numel(p, i, in.a, in.dst, "data0");
        require_same_numel(p, i, in.b, in.dst, "data1");
        break;
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
      case Opcode::kLoopBegin: check_loop_begin(p, i, in); break;
      default: break;
    }
  }
  nest_ = match_loops(p);
  widen_lifetimes(nest_, first, last);

  // Storage for the kernel's own buffers: a buffer takes a free slot of its memory that is large
  // enough (best fit) when it is first used and gives it back after its last use.
  slot_of_.assign(nb, -1);
  poison_before_.assign(p.instructions.size(), {});
  std::vector<std::vector<int32_t>> release_after(p.instructions.size());
  poison_.assign(nb, 0);
  for (size_t b = 0; b < nb; ++b) {
    if (p.buffers[b].binding >= 0) {  // a kernel output (the caller's memory): see run()
      poison_[b] = p.buffers[b].poison && !written_before_read(p, nest_, static_cast<int32_t>(b));
      continue;
    }
    if (first[b] < 0) continue;
    poison_before_[static_cast<size_t>(first[b])].push_back(static_cast<int32_t>(b));
    poison_[b] = !written_whole_first(p, static_cast<size_t>(first[b]), static_cast<int32_t>(b));
    release_after[static_cast<size_t>(last[b])].push_back(static_cast<int32_t>(b));
  }
  // A memset of a whole kernel buffer that the next instruction using the buffer overwrites
  // whole without reading it (cascaded_max fills its 8 MiB input tile with the padding value and
  // then loads all of it, as the shape divides: a quarter of its time), both outside device
  // loops, is not executed: no instruction could see its values.
  overwritten_.assign(p.instructions.size(), 0);
  const auto in_loop = [&](size_t i) { return !nest_.empty() && nest_.innermost[i] >= 0; };
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction& in = p.instructions[i];
    const int32_t b = in.dst.buffer;
    if (in.op != Opcode::kMemset || b < 0 || p.buffers[static_cast<size_t>(b)].binding >= 0 ||
        in_loop(i) || !written_whole_first(p, i, b)) {
      continue;
    }
    for (size_t j = i + 1; j < p.instructions.size(); ++j) {
      const Instruction& next = p.instructions[j];
      bool uses = false;
      for (const View* v : {&next.dst, &next.a, &next.b, &next.c, &next.d, &next.e, &next.f}) {
        uses = uses || (v->valid() && v->buffer == b);
      }
      if (!uses) continue;
      overwritten_[i] = !in_loop(j) && written_whole_first(p, j, b);
      break;
    }
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
        slot_offset_.push_back(scratch_bytes_);
        scratch_bytes_ += (bytes + 63) / 64 * 64;  // each slot 64-byte aligned in the block
      }
    }
    for (int32_t b : release_after[i]) {
      const int64_t slot = slot_of_[static_cast<size_t>(b)];
      free_slots.emplace(slot_bytes_[static_cast<size_t>(slot)], slot);
    }
  }
}

namespace {

// An instruction record is large (seven views of eight dims, about 1.3 KB) and a kernel of many
// small instructions walks megabytes of them a run, which other work takes out of the caches
// between calls (depthwise_conv1d: 6 MB). The lines that the dispatch and the common operations
// read (the opcode, dst / a / b, the scalars, the placed offsets) are requested a few
// instructions ahead, so that they arrive while earlier ones run.
inline void prefetch_instruction(const Instruction& in) {
  const char* const base = reinterpret_cast<const char*>(&in);
  const char* const views_end = reinterpret_cast<const char*>(&in.c);
  for (const char* q = base; q < views_end; q += 64) __builtin_prefetch(q);
  __builtin_prefetch(views_end - 1);
  __builtin_prefetch(&in.alu0);
  __builtin_prefetch(&in.reduce_cmd);
  __builtin_prefetch(&in.offsets);
}

}  // namespace

std::vector<std::string> Executable::run(const std::vector<External>& externals,
                                         const CollectiveHook* collectives,
                                         std::vector<int64_t>* loop_iterations) const {
  const Program& p = program_;
  Storage mem;
  mem.collectives = collectives;
  mem.base.resize(p.buffers.size(), nullptr);
  mem.dtype.resize(p.buffers.size());
  // Uninitialised: every buffer is poisoned before its first use (poison_before_), so zeroing
  // the slots first would only cost a pass over them.
  // One block for every slot, from the pool where a finished run left one.
  std::unique_ptr<uint8_t[]> block;
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    if (!pool_->idle.empty()) {
      block = std::move(pool_->idle.back());
      pool_->idle.pop_back();
    }
  }
  if (!block && scratch_bytes_ > 0) block.reset(new uint8_t[static_cast<size_t>(scratch_bytes_)]);
  // Given back when the run ends, also by an error.
  struct GiveBack {
    ScratchPool& pool;
    std::unique_ptr<uint8_t[]>& block;
    int64_t bytes;
    ~GiveBack() {
      if (!block || bytes > kPooledScratchBytes) return;
      std::lock_guard<std::mutex> lock(pool.mu);
      if (pool.idle.empty()) pool.idle.push_back(std::move(block));
    }
  } give_back{*pool_, block, scratch_bytes_};
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
      if (poison_[b]) poison(buf.dtype, ext.data, buf.elements);
    } else if (slot_of_[b] >= 0) {
      mem.base[b] = block.get() + slot_offset_[static_cast<size_t>(slot_of_[b])];
    }
  }
  // The kernel's own buffers never share memory while both are live (slots); the caller's
  // arguments may (one array passed twice, or views of one array).
  {
    std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      const Buffer& buf = p.buffers[b];
      const int64_t bytes = buf.elements * static_cast<int64_t>(dtype_size(buf.dtype));
      if (buf.binding >= 0 && bytes > 0) ranges.emplace_back(mem.base[b], mem.base[b] + bytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t k = 1; k < ranges.size(); ++k) {
      if (ranges[k].first < ranges[k - 1].second) mem.distinct = false;
    }
  }

  std::vector<std::string> printed;
  MatmulKernel matmul = g_matmul.load();
  const int threads = partition_threads();
  // The device loops running now, innermost last: the induction value, the upper bound read
  // on entry, and this execution's iterations so far.
  struct Running {
    size_t begin;
    int64_t value, upper, iterations;
    int64_t value2, upper2;  // the second core's, in a joint loop
  };
  std::vector<Running> running;
  std::vector<int64_t> iterations(nest_.begins.size(), 0);
  constexpr size_t kPrefetchAhead = 4;
  for (size_t i = 0; i < p.instructions.size();) {
    if (i + kPrefetchAhead < p.instructions.size()) {
      prefetch_instruction(p.instructions[i + kPrefetchAhead]);
      const std::vector<int32_t>& later = poison_before_[i + kPrefetchAhead];
      if (!later.empty()) __builtin_prefetch(later.data());
    }
    for (int32_t b : poison_before_[i]) {
      if (!poison_[static_cast<size_t>(b)]) continue;
      poison(mem.dtype[static_cast<size_t>(b)], mem.base[static_cast<size_t>(b)],
             p.buffers[static_cast<size_t>(b)].elements);
    }
    const Instruction& in = p.instructions[i];
    if (in.op == Opcode::kLoopBegin || in.op == Opcode::kLoopEnd) {
      const bool entering = in.op == Opcode::kLoopBegin;
      const size_t begin = entering ? i : static_cast<size_t>(nest_.partner[i]);
      const Instruction& loop = p.instructions[begin];
      const bool counted = (loop.axes & 1u) == 0, joint = (loop.axes & 2u) != 0;
      if (entering) {
        Running r{begin, 0, 0, 0, 0, 0};
        if (counted) {
          r.value = loop.a.valid() ? register_value(mem, loop.a) : static_cast<int64_t>(loop.imm0);
          r.upper = loop.b.valid() ? register_value(mem, loop.b) : static_cast<int64_t>(loop.imm1);
          if (joint) {
            r.value2 = register_value(mem, loop.c);
            r.upper2 = register_value(mem, loop.d);
          }
        }
        running.push_back(r);
      } else if (counted) {
        running.back().value += static_cast<int64_t>(loop.imm2);
        running.back().value2 += static_cast<int64_t>(loop.imm2);
      }
      Running& r = running.back();
      const bool again = counted ? r.value < r.upper : register_value(mem, loop.a) != 0;
      if (joint && again != (counted ? r.value2 < r.upper2 : register_value(mem, loop.c) != 0)) {
        fail(p, begin, "the two cores' device loop ends on one core and not on the other "
                       "after " + std::to_string(r.iterations) + " iterations: the loop holds "
                       "cross-core synchronisations, which would then not pair up (on the "
                       "hardware the core still looping would wait forever)");
      }
      if (!again) {
        running.pop_back();
        i = static_cast<size_t>(nest_.partner[begin]) + 1;
        continue;
      }
      if (++r.iterations > kMaxLoopIterations) {
        fail(p, begin, "the device loop ran " + std::to_string(kMaxLoopIterations) +
                           " iterations without ending (a while loop's condition register "
                           "never reached 0?); on the hardware it would not terminate");
      }
      iterations[static_cast<size_t>(nest_.loop_at(begin))] += 1;
      if (counted && loop.dst.valid()) store_ints(mem, loop.dst, {r.value});
      if (counted && joint && loop.e.valid()) store_ints(mem, loop.e, {r.value2});
      i = begin + 1;
      continue;
    }
    if (overwritten_[i]) {
      ++i;
      continue;
    }
    if (!in.offsets.empty()) {
      Instruction placed;
      if (place_operands(mem, p, i, in, placed) &&
          !(threads > 1 && run_split(mem, p, i, placed, threads))) {
        execute(mem, p, i, placed, matmul, printed);
      }
      ++i;
      continue;
    }
    if (threads > 1 && run_split(mem, p, i, in, threads)) {
      ++i;
      continue;
    }
    execute(mem, p, i, in, matmul, printed);
    ++i;
  }
  if (loop_iterations) *loop_iterations = std::move(iterations);
  return printed;
}

}  // namespace nrtsim::nki
