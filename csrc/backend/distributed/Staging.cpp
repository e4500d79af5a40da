#include "backend/distributed/Staging.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>
#include <type_traits>

#include "backend/core/HostView.h"

namespace torch_neuronx::distributed {

void dist_error(const std::string& message) { C10_THROW_ERROR(DistBackendError, message); }

at::Tensor host(const at::Tensor& t) { return t.is_cpu() ? t : host_view(t); }

at::Tensor host_bytes(const at::Tensor& t) { return host(t).reshape({-1}).view(at::kByte); }

tp::DType dtype_of(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kBool: return tp::DType::kBool;
    case at::kByte: return tp::DType::kUInt8;
    case at::kChar: return tp::DType::kInt8;
    case at::kShort: return tp::DType::kInt16;
    case at::kUInt16: return tp::DType::kUInt16;
    case at::kInt: return tp::DType::kInt32;
    case at::kUInt32: return tp::DType::kUInt32;
    case at::kLong: return tp::DType::kInt64;
    case at::kUInt64: return tp::DType::kUInt64;
    case at::kHalf: return tp::DType::kFloat16;
    case at::kBFloat16: return tp::DType::kBFloat16;
    case at::kFloat: return tp::DType::kFloat32;
    case at::kDouble: return tp::DType::kFloat64;
    case at::kComplexFloat: return tp::DType::kComplex64;
    case at::kComplexDouble: return tp::DType::kComplex128;
    case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2:
    case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e5m2fnuz:
    case at::kFloat8_e8m0fnu: return tp::DType::kOpaque1;
    default:
      dist_error(std::string("neuron process group: ") + op + " does not support tensors of " +
                 std::string(c10::toString(t.scalar_type())));
  }
}

namespace {

bool is_floating_or_complex(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type());
}

// x /= n for every element, truncating toward zero (C++ integer division), as NCCL's AVG does
// for integer types.
template <class T>
void divide_truncating(at::Tensor& out, int n) {
  T* p = out.data_ptr<T>();
  const auto divisor = static_cast<T>(n);
  for (int64_t i = 0, count = out.numel(); i < count; ++i) p[i] = static_cast<T>(p[i] / divisor);
}

}  // namespace

tp::ReduceOp reduce_op_of(const c10d::ReduceOp& op, const at::Tensor& t, const char* name) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return tp::ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      if (t.scalar_type() == at::kBool) {
        C10_THROW_ERROR(TypeError, std::string("neuron process group: ") + name +
                                       ": cannot use ReduceOp.AVG with boolean inputs");
      }
      return tp::ReduceOp::kSum;
    case c10d::ReduceOp::PREMUL_SUM:
      if (!is_floating_or_complex(t)) {
        dist_error(std::string("neuron process group: ") + name +
                   " with ReduceOp.PREMUL_SUM needs a floating-point tensor, got " +
                   std::string(c10::toString(t.scalar_type())) +
                   "; use ReduceOp.SUM and multiply yourself");
      }
      return tp::ReduceOp::kSum;
    case c10d::ReduceOp::PRODUCT: return tp::ReduceOp::kProduct;
    case c10d::ReduceOp::MIN: return tp::ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return tp::ReduceOp::kMax;
    case c10d::ReduceOp::BAND: return tp::ReduceOp::kBand;
    case c10d::ReduceOp::BOR: return tp::ReduceOp::kBor;
    case c10d::ReduceOp::BXOR: return tp::ReduceOp::kBxor;
    default: dist_error(std::string("neuron process group: ") + name + ": unknown reduce op");
  }
}

void finish_reduction(const c10d::ReduceOp& op, at::Tensor& out, int size) {
  if (op.op_ == c10d::ReduceOp::AVG) {
    if (is_floating_or_complex(out)) {
      out.div_(size);
      return;
    }
    at::Tensor x = host(out);
    switch (x.scalar_type()) {
      case at::kByte: return divide_truncating<uint8_t>(x, size);
      case at::kChar: return divide_truncating<int8_t>(x, size);
      case at::kShort: return divide_truncating<int16_t>(x, size);
      case at::kUInt16: return divide_truncating<uint16_t>(x, size);
      case at::kInt: return divide_truncating<int32_t>(x, size);
      case at::kUInt32: return divide_truncating<uint32_t>(x, size);
      case at::kLong: return divide_truncating<int64_t>(x, size);
      case at::kUInt64: return divide_truncating<uint64_t>(x, size);
      default:
        dist_error("neuron process group: ReduceOp.AVG on " +
                   std::string(c10::toString(x.scalar_type())) + " tensors is not defined");
    }
  } else if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    const auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(supplement != nullptr, "PREMUL_SUM without a factor");
    if (supplement->tensor_factor.defined()) {
      out.mul_(supplement->tensor_factor.to(at::kCPU).item().toDouble());
    } else {
      out.mul_(supplement->double_factor);
    }
  }
}

void check_dense(const at::Tensor& t, const char* op) {
  if (t.layout() != at::kStrided) {
    dist_error(std::string("neuron process group: ") + op +
               " takes dense (strided) tensors; got layout " + std::string(c10::str(t.layout())));
  }
  if (!t.is_cpu() && t.device().type() != c10::DeviceType::PrivateUse1) {
    dist_error(std::string("neuron process group: ") + op + " takes neuron or cpu tensors, got " +
               t.device().str());
  }
}

Staged stage(const at::Tensor& t, const char* op) {
  check_dense(t, op);
  return Staged{t, t.is_contiguous() ? t : t.contiguous()};
}

void unstage(Staged& s) {
  if (s.copy_back()) s.original.copy_(s.work);
}

}  // namespace torch_neuronx::distributed
