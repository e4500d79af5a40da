#include "backend/core/Cost.h"

namespace torch_neuronx {

uint64_t bytes_in_memory(const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 0;
  uint64_t elements = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) != 0) elements *= static_cast<uint64_t>(t.size(d));
  }
  return elements * t.element_size();
}

uint64_t bytes_of_elements(const at::Tensor& t) {
  return t.defined() ? static_cast<uint64_t>(t.numel()) * t.element_size() : 0;
}

nrtsim::Precision precision_of(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16:
    case at::kHalf:
      return nrtsim::Precision::kBf16;
    case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2:
    case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e5m2fnuz:
      return nrtsim::Precision::kFp8;
    default:
      return nrtsim::Precision::kFp32;
  }
}

Cost& Cost::reads(const at::Tensor& t) {
  if (!t.defined()) return *this;
  // A host scalar (x * 0.5's wrapped number, a 0-d CPU tensor) is an operand of the instruction,
  // not HBM traffic, and does not set the number format the engines stream.
  if (t.dim() == 0 && t.device().is_cpu()) return *this;
  work_[engine_].bytes_read += bytes_in_memory(t);
  if (precision_fixed_) return *this;
  if (c10::isFloatingType(t.scalar_type()) || c10::isComplexType(t.scalar_type())) {
    const int bits = static_cast<int>(t.element_size()) * 8;
    if (bits > precision_bits_) {
      precision_bits_ = bits;
      work_.precision = precision_of(t.scalar_type());
    }
  }
  return *this;
}

Cost& Cost::reads(c10::ArrayRef<at::Tensor> ts) {
  for (const auto& t : ts) reads(t);
  return *this;
}

Cost& Cost::writes(const at::Tensor& t) {
  work_[engine_].bytes_written += bytes_of_elements(t);
  return *this;
}

Cost& Cost::writes(c10::ArrayRef<at::Tensor> ts) {
  for (const auto& t : ts) writes(t);
  return *this;
}

Cost& Cost::ops(Engine engine, uint64_t n) {
  work_[engine].ops += n;
  return *this;
}

Cost& Cost::read_bytes(uint64_t n) {
  work_[engine_].bytes_read += n;
  return *this;
}

Cost& Cost::write_bytes(uint64_t n) {
  work_[engine_].bytes_written += n;
  return *this;
}

Cost& Cost::number_format_of(const at::Tensor& t) {
  work_.precision = precision_of(t.scalar_type());
  precision_fixed_ = true;
  return *this;
}

}  // namespace torch_neuronx
