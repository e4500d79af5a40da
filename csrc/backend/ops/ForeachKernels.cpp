// Foreach (multi-tensor) elementwise kernels: one pass over every tensor of the lists.
//
// torch.optim's default implementations (foreach) update all parameters with a handful of these
// ops per step (AdamW: eight). Run as host math, the CPU's foreach kernel loops over the tensors
// and per tensor wraps the scalar in a tensor, builds a TensorIterator and forks the intra-op
// threads: 5-10 us a tensor, about what the arithmetic of a 256x256 weight costs. Here the lists
// are one index space, split once among the intra-op threads; each thread walks its range with a
// loop the compiler vectorizes, straight over the HBM buffers (host memory in nrtsim). One launch
// record per op, as before.
//
// Served: float32 or float64 tensors on one neuron device, each contiguous, as optimizers hold
// parameters, gradients and states. Everything else takes the host-math path, which reproduces
// the CPU's results and errors: mixed dtypes or devices, strides, a written tensor that partly
// overlaps another, and bfloat16 and half, whose scalars the CPU's foreach kernels round to the
// tensors' dtype in some ops and forms and not in others.
//
// Arithmetic is the CPU kernels' own, in the same order, with a fused multiply-add where their
// vectorized loops use one (add with alpha, lerp). Results match the CPU's bit for bit, except in
// the last bit of elements the CPU computed in its scalar loop tails (no fused multiply-add
// there) and of sqrt, which is exact here and within a bit of exact in the CPU's math library.
#include "backend/ops/ForeachKernels.h"

#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backend/core/BoxedArgs.h"
#include "backend/core/DeviceCheck.h"
#include "backend/core/KernelLaunch.h"

// The loops are compiled for AVX-512, AVX with FMA, and the x86-64 baseline, chosen when the
// library loads (the extension itself targets the baseline, as torch's own kernels do before
// their runtime dispatch).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TORCH_NEURONX_VECTOR_CLONES __attribute__((target_clones("avx512f", "fma", "default")))
#else
#define TORCH_NEURONX_VECTOR_CLONES
#endif

// Elementwise loops: iteration i reads and writes only element i of each operand. Operands are
// equal or disjoint (checked before a kernel runs), so there is no dependence to test at run time.
#if defined(__GNUC__) && !defined(__clang__)
#define TORCH_NEURONX_ELEMENTWISE _Pragma("GCC ivdep")
#elif defined(__clang__)
#define TORCH_NEURONX_ELEMENTWISE _Pragma("clang loop vectorize(assume_safety)")
#else
#define TORCH_NEURONX_ELEMENTWISE
#endif

namespace torch_neuronx {
namespace {

enum class Math { kMul, kAdd, kDiv, kLerp, kAddcmul, kAddcdiv, kSqrt, kZero };

// One tensor's operands: `out` is written, `x` (self), `y` and `z` (the other lists) are read;
// `c` is this tensor's scalar (value, scalar-list entry, weight or scalar tensor), `alpha` add's.
struct Operands {
  void* out;
  const void* x;
  const void* y;
  const void* z;
  double c;
  double alpha;
};

#define TORCH_NEURONX_INLINE inline __attribute__((always_inline))

// out[i] = f(x[i], y[i], z[i]); unused operands are not read.
template <int kInputs, class T, class F>
TORCH_NEURONX_INLINE void elementwise(T* out, const T* x, const T* y, const T* z, int64_t n,
                                      F f) {
  TORCH_NEURONX_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i) {
    out[i] = f(x[i], kInputs >= 2 ? y[i] : T(0), kInputs >= 3 ? z[i] : T(0));
  }
}

// The CPU's lerp: the form that is exact at the nearer end, chosen by the weight's size.
template <class T>
TORCH_NEURONX_INLINE T lerp(T self, T end, T weight) {
  return std::abs(weight) < T(0.5) ? std::fma(weight, end - self, self)
                                   : std::fma(weight - T(1), end - self, end);
}

// float32 and float64 compute in their own type. A second list is there when `o.y` is; lerp's
// weights are a third list when `o.z` is.
template <class T>
TORCH_NEURONX_INLINE void range_of(Math math, const Operands& o, int64_t begin, int64_t n) {
  using M = T;
  T* out = static_cast<T*>(o.out) + begin;
  const T* x = static_cast<const T*>(o.x) + begin;
  const T* y = o.y == nullptr ? nullptr : static_cast<const T*>(o.y) + begin;
  const T* z = o.z == nullptr ? nullptr : static_cast<const T*>(o.z) + begin;
  const M c = static_cast<M>(o.c);
  const M alpha = static_cast<M>(o.alpha);
  const bool second_list = y != nullptr;
  switch (math) {
    case Math::kMul:
      if (second_list) {
        elementwise<2>(out, x, y, z, n, [](M a, M b, M) { return a * b; });
      } else {
        elementwise<1>(out, x, y, z, n, [c](M a, M, M) { return a * c; });
      }
      break;
    case Math::kAdd:
      if (second_list) {
        elementwise<2>(out, x, y, z, n, [alpha](M a, M b, M) { return std::fma(b, alpha, a); });
      } else {
        elementwise<1>(out, x, y, z, n, [c, alpha](M a, M, M) { return std::fma(c, alpha, a); });
      }
      break;
    case Math::kDiv:
      if (second_list) {
        elementwise<2>(out, x, y, z, n, [](M a, M b, M) { return a / b; });
      } else {
        elementwise<1>(out, x, y, z, n, [c](M a, M, M) { return a / c; });
      }
      break;
    case Math::kLerp:
      if (z != nullptr) {
        elementwise<3>(out, x, y, z, n, [](M a, M b, M w) { return lerp(a, b, w); });
      } else if (std::abs(c) < M(0.5)) {
        elementwise<2>(out, x, y, z, n, [c](M a, M b, M) { return std::fma(c, b - a, a); });
      } else {
        const M from_end = c - M(1);
        elementwise<2>(out, x, y, z, n, [from_end](M a, M b, M) {
          return std::fma(from_end, b - a, b);
        });
      }
      break;
    case Math::kAddcmul:
      elementwise<3>(out, x, y, z, n, [c](M a, M b, M d) { return a + c * b * d; });
      break;
    case Math::kAddcdiv:
      elementwise<3>(out, x, y, z, n, [c](M a, M b, M d) { return a + c * b / d; });
      break;
    case Math::kSqrt:
      elementwise<1>(out, x, y, z, n, [](M a, M, M) { return std::sqrt(a); });
      break;
    case Math::kZero:
      std::memset(static_cast<void*>(out), 0, static_cast<size_t>(n) * sizeof(T));
      break;
  }
}

TORCH_NEURONX_VECTOR_CLONES
void run_range(Math math, c10::ScalarType dtype, const Operands& o, int64_t begin, int64_t n) {
  switch (dtype) {
    case c10::ScalarType::Float:
      range_of<float>(math, o, begin, n);
      break;
    case c10::ScalarType::Double:
      range_of<double>(math, o, begin, n);
      break;
    default:
      TORCH_INTERNAL_ASSERT(false, "foreach kernel: unserved dtype ", dtype);
  }
}

// The calls a kernel serves: what the schema's arguments are, read off one call's stack.
struct Call {
  std::vector<std::vector<at::Tensor>> lists;  // self first, then the other lists in order
  std::vector<double> c;                       // one scalar per tensor (1.0 where none)
  double alpha = 1.0;
};

// Bytes [begin, end) of a tensor and the index of its list entry.
struct Extent {
  const char* begin;
  const char* end;
  size_t index;
};

Extent extent_of(const at::Tensor& t, size_t index) {
  const char* begin = static_cast<const char*>(t.const_data_ptr());
  return {begin, begin + t.nbytes(), index};
}

class ForeachKernel final : public c10::OperatorKernel {
 public:
  ForeachKernel(const OpFamily& family, Math math, std::string name)
      : family_(family), math_(math), name_(nrtsim::intern(name)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const c10::FunctionSchema& schema = op.schema();
    const size_t n_args = schema.arguments().size();
    const size_t first = stack->size() - n_args;
    std::optional<Call> call = served(schema, *stack, first);
    if (!call) {
      run_host_math(family_, op, stack);
      return;
    }
    const bool in_place = schema.name().back() == '_';
    const std::vector<at::Tensor>& self = call->lists[0];
    Kernel kernel(name_, self[0].device(), family_.engine);
    for (size_t i = 0; i < n_args; ++i) {
      const c10::IValue& v = (*stack)[first + i];
      if (v.isTensorList()) kernel.reads(at::TensorList(v.toTensorVector()));
      if (v.isTensor()) kernel.reads(v.toTensor());
    }
    kernel.ops(family_.flops(schema, KernelArgs(stack->data() + first, n_args)));
    std::vector<at::Tensor> outputs;
    if (in_place) {
      outputs = self;
    } else {
      outputs.reserve(self.size());
      for (const auto& t : self) outputs.push_back(at::empty(t.sizes(), t.options()));
    }
    kernel.writes(at::TensorList(outputs));
    torch::jit::drop(*stack, n_args);

    const c10::ScalarType dtype = self[0].scalar_type();
    // Element offsets where each tensor starts in the lists' one index space.
    std::vector<int64_t> starts(self.size() + 1, 0);
    for (size_t i = 0; i < self.size(); ++i) starts[i + 1] = starts[i] + self[i].numel();
    std::vector<Operands> operands(self.size());
    for (size_t i = 0; i < self.size(); ++i) {
      const auto& lists = call->lists;
      operands[i] = {outputs[i].mutable_data_ptr(), self[i].const_data_ptr(),
                     lists.size() >= 2 ? lists[1][i].const_data_ptr() : nullptr,
                     lists.size() >= 3 ? lists[2][i].const_data_ptr() : nullptr, call->c[i],
                     call->alpha};
    }
    kernel.run([&] {
      at::parallel_for(0, starts.back(), at::internal::GRAIN_SIZE, [&](int64_t b, int64_t e) {
        size_t i = std::upper_bound(starts.begin(), starts.end(), b) - starts.begin() - 1;
        for (; b < e; ++i) {
          const int64_t stop = std::min(e, starts[i + 1]);
          if (stop > b) {
            run_range(math_, dtype, operands[i], b - starts[i], stop - b);
          }
          b = stop;
        }
      });
    });
    if (!in_place) stack->emplace_back(c10::List<at::Tensor>(outputs));
  }

 private:
  // The call's operands if this kernel serves it, else nothing (host math takes it).
  std::optional<Call> served(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                             size_t first) const {
    Call call;
    std::optional<double> scalar;
    std::optional<std::vector<double>> scalars;
    const auto& arguments = schema.arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      const c10::IValue& v = stack[first + i];
      if (v.isTensorList()) {
        call.lists.push_back(v.toTensorVector());
      } else if (v.isScalar()) {
        if (v.isComplexDouble()) return std::nullopt;
        (arguments[i].name() == "alpha" ? call.alpha : scalar.emplace()) = v.toScalar().toDouble();
      } else if (v.isDoubleList() || v.isIntList() || v.isList()) {
        std::vector<double> values;
        for (const c10::IValue& s : v.toListRef()) {
          if (!s.isScalar() || s.isComplexDouble()) return std::nullopt;
          values.push_back(s.toScalar().toDouble());
        }
        scalars = std::move(values);
      } else if (v.isTensor()) {
        std::optional<double> value = scalar_tensor_value(v.toTensor(), call.lists);
        if (!value) return std::nullopt;
        scalar = value;
      } else if (!v.isNone()) {
        return std::nullopt;
      }
    }
    if (call.lists.empty() || call.lists[0].empty()) return std::nullopt;
    const std::vector<at::Tensor>& self = call.lists[0];
    const size_t n = self.size();
    if (scalars && scalars->size() != n) return std::nullopt;
    const at::Tensor& lead = self[0];
    if (!is_neuron(lead)) return std::nullopt;
    const c10::ScalarType dtype = lead.scalar_type();
    if (dtype != c10::kFloat && dtype != c10::kDouble) return std::nullopt;
    for (const auto& list : call.lists) {
      if (list.size() != n) return std::nullopt;
      for (size_t i = 0; i < n; ++i) {
        const at::Tensor& t = list[i];
        if (!is_neuron(t) || t.device() != lead.device() || t.scalar_type() != dtype ||
            !t.is_contiguous() || t.sizes() != self[i].sizes() || t.is_conj() || t.is_neg()) {
          return std::nullopt;
        }
      }
    }
    if (schema.name().back() == '_' && !writes_are_separate(call.lists)) return std::nullopt;
    call.c.assign(n, 1.0);
    if (scalars) call.c = *scalars;
    if (scalar) call.c.assign(n, *scalar);
    return call;
  }

  // A 0-dim tensor scalar of the lists' dtype, on the host or the lists' device: its value.
  static std::optional<double> scalar_tensor_value(
      const at::Tensor& t, const std::vector<std::vector<at::Tensor>>& lists) {
    if (!t.defined() || t.dim() != 0 || lists.empty() || lists[0].empty()) return std::nullopt;
    const at::Tensor& lead = lists[0][0];
    if (t.scalar_type() != lead.scalar_type() || t.is_complex()) return std::nullopt;
    if (!t.device().is_cpu() && t.device() != lead.device()) return std::nullopt;
    return t.item().toDouble();
  }

  // In place, iteration order must not matter: the written tensors (self) do not overlap one
  // another, and a read tensor either is its own entry's written tensor exactly or overlaps none.
  static bool writes_are_separate(const std::vector<std::vector<at::Tensor>>& lists) {
    const std::vector<at::Tensor>& self = lists[0];
    std::vector<Extent> written;
    written.reserve(self.size());
    for (size_t i = 0; i < self.size(); ++i) {
      if (self[i].numel() > 0) written.push_back(extent_of(self[i], i));
    }
    std::sort(written.begin(), written.end(),
              [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
    for (size_t k = 1; k < written.size(); ++k) {
      if (written[k].begin < written[k - 1].end) return false;
    }
    for (size_t l = 1; l < lists.size(); ++l) {
      for (size_t i = 0; i < lists[l].size(); ++i) {
        const at::Tensor& t = lists[l][i];
        if (t.numel() == 0) continue;
        const Extent read = extent_of(t, i);
        // The last written extent starting before `read` ends is the only one it can overlap
        // without overlapping a later one too, which starts at or after that one's end.
        auto after = std::lower_bound(
            written.begin(), written.end(), read.end,
            [](const Extent& w, const char* end) { return w.begin < end; });
        if (after == written.begin()) continue;
        const Extent& w = *(after - 1);
        if (w.end <= read.begin) continue;
        const bool same = w.index == i && w.begin == read.begin && w.end == read.end;
        if (!same || (after - 1 != written.begin() && (after - 2)->end > read.begin)) {
          return false;
        }
      }
    }
    return true;
  }

  OpFamily family_;
  Math math_;
  const char* name_;  // interned
};

struct Served {
  const char* base;  // "_foreach_mul": the functional and in-place forms
  Math math;
  std::initializer_list<const char*> overloads;
};

}  // namespace

void register_foreach_kernels(torch::Library& library, const OpFamily& family) {
  static const Served kServed[] = {
      {"_foreach_mul", Math::kMul, {"Scalar", "ScalarList", "List", "Tensor"}},
      {"_foreach_add", Math::kAdd, {"Scalar", "ScalarList", "List", "Tensor"}},
      {"_foreach_div", Math::kDiv, {"Scalar", "ScalarList", "List", "Tensor"}},
      {"_foreach_lerp", Math::kLerp, {"Scalar", "ScalarList", "List"}},
      {"_foreach_addcmul", Math::kAddcmul, {"Scalar", "ScalarList"}},
      {"_foreach_addcdiv", Math::kAddcdiv, {"Scalar", "ScalarList"}},
      {"_foreach_sqrt", Math::kSqrt, {""}},
  };
  auto& dispatcher = c10::Dispatcher::singleton();
  auto add = [&](const std::string& name, const std::string& overload, Math math) {
    const c10::OperatorName op("aten::" + name, overload);
    auto handle = dispatcher.findOp(op);
    TORCH_INTERNAL_ASSERT(handle && handle->hasSchema(), "foreach kernel: no op ", op_name(op),
                          " in this torch");
    const std::string local = overload.empty() ? name : name + "." + overload;
    library.impl(local.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                    std::make_unique<ForeachKernel>(family, math, op_name(op))));
  };
  for (const Served& s : kServed) {
    for (const char* overload : s.overloads) {
      add(s.base, overload, s.math);
      add(std::string(s.base) + "_", overload, s.math);
    }
  }
  add("_foreach_zero_", "", Math::kZero);
}

}  // namespace torch_neuronx
