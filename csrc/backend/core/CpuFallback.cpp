// The catch-all for ATen ops without a native neuron kernel: run the op on the CPU and copy the
// results back, as one host-fallback launch record (torch_neuronx.get_fallback_ops() lists the
// ops that yielded one). Each op is warned about once
// (TORCH_NEURONX_FALLBACK_WARN=0 silences the warning).
//
// Before handing over, the fallback enforces what a native kernel would: all tensors on one
// device (CPU scalars and CPU index tensors excepted, as on CUDA), and neuron generators (or the
// device's default generator, where the generator is omitted) replaced by CPU generators drawing
// from the neuron stream, so seeding still governs the op's randomness.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/core/BoxedArgs.h"
#include "backend/core/DeviceCheck.h"
#include "backend/core/BoxedHostMath.h"
#include "backend/core/KernelLaunch.h"
#include "runtime/Env.h"

namespace torch_neuronx {
namespace {

// TORCH_NEURONX_FALLBACK_WARN, read when an op is about to be warned about (a script may set
// it after importing the package); a value that is not a switch raises, listing the switch words.
bool warnings_enabled() {
  return runtime_call(
      [] { return nrtsim::env::switch_value("TORCH_NEURONX_FALLBACK_WARN").value_or(true); });
}

void warn_once(const std::string& name) {
  static std::mutex mutex;
  static auto* warned = new std::set<std::string>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (warned->count(name) != 0) return;
  }
  // Before the op counts as warned about: a bad value raises again at the next call.
  const bool enabled = warnings_enabled();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned->insert(name).second) return;
  }
  if (enabled) {
    TORCH_WARN("Operator '", name, "' executed via CPU fallback on neuron: it has no native "
               "kernel, so its inputs are copied to the host and its results back, which costs "
               "performance. torch_neuronx.get_fallback_ops() lists every such op; set "
               "TORCH_NEURONX_FALLBACK_WARN=0 to silence this warning.");
  }
}

// The fallback hands the CPU a copy of each argument, one by one: memory that arguments share on
// neuron is not shared among the copies, and a written argument that overlaps itself (an
// expanded tensor) is copied dense. The CPU kernel could then neither refuse the overlaps the
// CPU refuses (x[1:6].__ilshift__(x[:5]) computed order-dependent values where the CPU raises)
// nor write as it writes to memory it reads. A call whose written argument overlaps itself or
// shares memory with another argument runs on host views instead, which keep the sharing (see
// host_view), in the same host-fallback launch kind.
bool writes_shared_memory(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                          size_t first) {
  std::vector<std::pair<at::Tensor, bool>> tensors;  // (neuron tensor, written)
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& value = stack[first + i];
    const bool written = args[i].alias_info() != nullptr && args[i].alias_info()->isWrite();
    auto add = [&](const at::Tensor& t) {
      if (is_neuron(t) && t.storage().data() != nullptr) tensors.emplace_back(t, written);
    };
    if (value.isTensor()) {
      add(value.toTensor());
    } else if (value.isTensorList()) {
      for (const auto& t : value.toTensorVector()) add(t);
    } else if (value.isOptionalTensorList()) {
      for (const auto& t : value.toOptionalTensorVector()) {
        if (t.has_value()) add(*t);
      }
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].second) continue;
    if (at::has_internal_overlap(tensors[i].first) == at::MemOverlap::Yes) return true;
    for (size_t j = 0; j < tensors.size(); ++j) {
      if (j != i && tensors[j].first.storage().data() == tensors[i].first.storage().data()) {
        return true;
      }
    }
  }
  return false;
}

// What a fallback call on host views counts: no FLOP model (the op has no family), its bytes.
constexpr OpFamily kFallbackOnHostViews{"fallback", nrtsim::Engine::kVector, &flops::none};

void neuron_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name(op.operator_name());
  const size_t num_args = op.schema().arguments().size();
  const size_t first = stack->size() - num_args;
  if (writes_shared_memory(op.schema(), *stack, first)) {
    warn_once(name);
    run_host_math(kFallbackOnHostViews, op, stack, LaunchKind::kHostFallback);
    return;
  }
  const std::optional<c10::Device> device = check_devices(name, op.schema(), *stack, first);
  substitute_generators(op.schema(), *stack, first, device);
  warn_once(name);
  // One launch record of kind host-fallback: the host computation, charged at its host time; the
  // copies in and out are launches of their own, nested inside it. Op tracking lists the op as a
  // fallback from this record.
  const c10::DeviceIndex index = device.has_value() ? device->index() : current_device();
  launch_on(index, nrtsim::intern(name), LaunchKind::kHostFallback, nrtsim::Work{}, [&] {
    // View-returning ops cannot be emulated by copying; those need native kernels (Views.cpp).
    at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
  });
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_cpu_fallback>());
}

// Sparse layouts have no neuron kernels, and the fallback above cannot carry sparse results back.
// Ops that reach a sparse neuron tensor without a kernel say so, instead of PyTorch's generic
// "could not run ... with arguments from the 'Sparseneuron' backend". (Composite kernels, e.g.
// the sparse constructors that Tensor.to() uses, still take precedence over this.)
void sparse_unsupported(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op_name(op.operator_name()),
                              ": sparse tensors (COO, CSR, CSC, BSR, BSC) are not supported on "
                              "neuron. Keep sparse tensors and their ops on the CPU, or convert "
                              "with to_dense() before moving them to neuron.");
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_unsupported>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_unsupported>());
}

}  // namespace
}  // namespace torch_neuronx
