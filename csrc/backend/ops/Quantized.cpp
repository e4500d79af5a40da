// Quantized tensors (torch.qint8, quint8, qint32, quint4x2, quint2x4) are not supported on
// neuron, as in TorchNeuron, whose operator table lists the quantized variants as unsupported.
//
// Supporting them would take more than a dtype: a quantized tensor on a PrivateUse1 device carries
// the QuantizedPrivateUse1 key and a quantizer, and every op on it needs a kernel for that key
// (PyTorch's own quantized kernels are FBGEMM/QNNPACK/oneDNN CPU code behind QuantizedCPU, plus
// a few for QuantizedCUDA). Without them PyTorch fails deep inside with "Could not run
// 'aten::empty_quantized' with arguments from the 'Quantizedneuron' backend". Instead, every way
// to make a quantized neuron tensor raises one error that names the op, the limit and the fix:
// the quantize ops on neuron inputs (which the CPU fallback would otherwise run, only to fail
// copying the quantized result back), and any op that reaches the QuantizedPrivateUse1 key
// (factories with a quantized dtype, `.to("neuron")` of a quantized CPU tensor).
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/jit_type.h>
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "backend/core/BoxedArgs.h"

namespace torch_neuronx {
namespace {

bool is_scalar_type_argument(const c10::Argument& arg) {
  const c10::TypePtr& type = arg.real_type();
  if (type->kind() == c10::TypeKind::ScalarTypeType) return true;
  const auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::ScalarTypeType;
}

// The quantized dtype the call asks for or carries, for the message.
std::optional<c10::ScalarType> quantized_dtype_of(const c10::FunctionSchema& schema,
                                                  const torch::jit::Stack& stack) {
  const size_t n = schema.arguments().size();
  const size_t first = stack.size() - n;
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& value = stack[first + i];
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().is_quantized()) {
      return value.toTensor().scalar_type();
    }
    if (value.isInt() && is_scalar_type_argument(schema.arguments()[i])) {
      const auto dtype = static_cast<c10::ScalarType>(value.toInt());
      if (c10::isQIntType(dtype)) return dtype;
    }
  }
  return std::nullopt;
}

// The dtype as Python spells it.
const char* python_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::QInt8: return "torch.qint8";
    case c10::ScalarType::QUInt8: return "torch.quint8";
    case c10::ScalarType::QInt32: return "torch.qint32";
    case c10::ScalarType::QUInt4x2: return "torch.quint4x2";
    case c10::ScalarType::QUInt2x4: return "torch.quint2x4";
    default: return c10::toString(dtype);
  }
}

void quantized_unsupported(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto dtype = quantized_dtype_of(op.schema(), *stack);
  const std::string which = dtype ? std::string(" (here ") + python_name(*dtype) + ")" : "";
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, op_name(op.operator_name()), ": quantized tensors", which,
      " are not supported on neuron, as in TorchNeuron. Keep quantized tensors and their ops on "
      "the CPU (quantize a CPU tensor: x.cpu()), and move float results to neuron "
      "(q.dequantize().to(\"neuron\")); for low-bit weights on neuron, store them as plain "
      "int8/uint8 tensors and scale them in floating point.");
}

// Quantize ops on neuron (float) inputs: the CPU fallback would run them, then fail copying the
// quantized result back; raise before any work, under the op the user called.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  const auto raise = [] {
    return torch::CppFunction::makeFromBoxedFunction<&quantized_unsupported>();
  };
  for (const char* name :
       {"quantize_per_tensor", "quantize_per_tensor.tensor_qparams", "quantize_per_tensor.tensors",
        "quantize_per_tensor.out", "quantize_per_tensor.tensor_qparams_out",
        "quantize_per_tensor.tensors_out", "quantize_per_tensor_dynamic",
        "quantize_per_tensor_dynamic.out", "quantize_per_channel", "quantize_per_channel.out",
        "_make_per_tensor_quantized_tensor", "_make_per_tensor_quantized_tensor.out",
        "_make_per_channel_quantized_tensor", "_make_per_channel_quantized_tensor.out"}) {
    m.impl(name, raise());
  }
}

// Everything that reaches a quantized neuron tensor, or asks for one.
TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&quantized_unsupported>());
}

}  // namespace
}  // namespace torch_neuronx
