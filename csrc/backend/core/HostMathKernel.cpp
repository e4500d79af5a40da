#include "backend/core/HostMathKernel.h"

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/core/BoxedArgs.h"
#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {

namespace {

bool is_neuron(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

int64_t numel_of(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().defined() ? v.toTensor().numel() : 0;
  int64_t total = 0;
  if (v.isTensorList()) {
    for (const auto& t : v.toTensorVector()) total += t.numel();
  }
  return total;
}

// One neuron tensor argument and the host view standing in for it.
struct Swapped {
  at::Tensor original;
  at::Tensor view;
  bool writable;
};

class HostMathKernel final : public c10::OperatorKernel {
 public:
  HostMathKernel(const OpFamily& family, std::string name)
      : family_(family), name_(std::move(name)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const c10::FunctionSchema& schema = op.schema();
    const auto& arguments = schema.arguments();
    const size_t first = stack->size() - arguments.size();

    const std::optional<c10::Device> found = check_devices(name_, schema, *stack, first);
    const c10::Device device = found.value_or(c10::Device(c10::DeviceType::PrivateUse1));
    const c10::DeviceGuard guard(device);
    substitute_generators(schema, *stack, first, device);

    std::vector<Swapped> swapped;
    uint64_t bytes = 0;
    auto swap = [&](const at::Tensor& t, bool writable) -> at::Tensor {
      if (!is_neuron(t)) return t;
      swapped.push_back({t, host_view(t, writable), writable});
      bytes += tensor_bytes(t);
      return swapped.back().view;
    };
    for (size_t i = 0; i < arguments.size(); ++i) {
      c10::IValue& value = (*stack)[first + i];
      const auto* alias = arguments[i].alias_info();
      const bool writable = alias != nullptr && alias->isWrite();
      if (value.isTensor()) {
        value = swap(value.toTensor(), writable);
      } else if (value.isTensorList()) {
        c10::List<at::Tensor> views;
        for (const auto& t : value.toTensorVector()) views.push_back(swap(t, writable));
        value = views;
      } else if (value.isOptionalTensorList()) {
        c10::List<std::optional<at::Tensor>> views;
        for (const auto& t : value.toOptionalTensorVector()) {
          views.push_back(t.has_value() ? std::optional<at::Tensor>(swap(*t, writable)) : t);
        }
        value = views;
      }
    }
    const uint64_t flops =
        family_.flops(schema, KernelArgs(stack->data() + first, arguments.size()));

    launch_kernel(device.index(), KernelInfo{name_.c_str(), flops, bytes, family_.engine},
                  [&] {
                    const HostAllocationsInHbm results_in_hbm(device.index());
                    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
                  });

    for (const auto& s : swapped) {
      if (s.writable) adopt_host_view(s.view, s.original);
    }
    for (size_t i = first; i < stack->size(); ++i) {
      c10::IValue& result = (*stack)[i];
      if (result.isTensor()) {
        result = to_neuron(result.toTensor(), swapped, device);
      } else if (result.isTensorList()) {
        c10::List<at::Tensor> moved;
        for (const auto& t : result.toTensorVector()) moved.push_back(to_neuron(t, swapped, device));
        result = moved;
      }
    }
  }

 private:
  // A result of the CPU kernel, as the neuron tensor it stands for.
  static at::Tensor to_neuron(const at::Tensor& t, const std::vector<Swapped>& swapped,
                              c10::Device device) {
    if (!t.defined() || is_neuron(t)) return t;
    for (const auto& s : swapped) {
      if (t.is_same(s.view)) return s.original;
    }
    for (const auto& s : swapped) {
      // An alias of an argument the schema did not announce: alias the neuron tensor likewise.
      if (t.storage().data() != nullptr && t.storage().data() == s.view.storage().data()) {
        return s.original.as_strided(t.sizes(), t.strides(), t.storage_offset());
      }
    }
    if (!t.device().is_cpu()) return t;
    // A fresh result of a functional op (allocated in HBM by the launch's HostAllocationsInHbm
    // scope): it becomes the neuron tensor, without a copy.
    return move_to_hbm(t, device);
  }

  OpFamily family_;
  std::string name_;
};

// No argument is written. The functional form of a structured op gets a kernel of its own: the
// generic wrapper PyTorch would use instead allocates its output through empty.memory_format with
// the format the inputs suggest, channels-last for channels-last-strided inputs, which neuron
// rejects when a program asks for it (TorchNeuron's rule). Run on the host, the CPU kernel picks
// the output strides as on the CPU and the result moves to HBM with them.
bool is_functional(const c10::FunctionSchema& schema) {
  for (const auto& a : schema.arguments()) {
    if (a.alias_info() != nullptr && a.alias_info()->isWrite()) return false;
  }
  return true;
}

bool returns_view(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns()) {
    if (r.alias_info() != nullptr && !r.alias_info()->isWrite()) return true;
  }
  return false;
}

void register_overload(torch::Library& library, const OpFamily& family,
                       const c10::OperatorHandle& handle) {
  const std::string name = op_name(handle.operator_name());
  const std::string local = name.substr(name.find("::") + 2);
  library.impl(local.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                  std::make_unique<HostMathKernel>(family, name)));
}

}  // namespace

std::vector<std::string>& unregistered_names() {
  static auto* names = new std::vector<std::string>();
  return *names;
}

void check_input_devices(const char* op, c10::Device device,
                         std::initializer_list<const at::Tensor*> inputs) {
  for (const at::Tensor* t : inputs) {
    if (!t->defined() || t->device() == device) continue;
    if (!t->device().is_cpu() || t->dim() != 0) fail_two_devices(op, device, t->device());
  }
}

void check_out_devices(const char* op, const at::Tensor& out,
                       std::initializer_list<const at::Tensor*> inputs) {
  TORCH_CHECK(is_neuron(out), op, ": expected the output on neuron, got ", out.device());
  check_input_devices(op, out.device(), inputs);
}

uint64_t flops_none(const c10::FunctionSchema&, KernelArgs) { return 0; }

uint64_t flops_per_element(const c10::FunctionSchema&, KernelArgs args) {
  int64_t largest = 0;
  for (const auto& a : args) largest = std::max(largest, numel_of(a));
  return static_cast<uint64_t>(largest);
}

uint64_t flops_matmul(const c10::FunctionSchema& schema, KernelArgs args) {
  // The multiplied operands by schema name: addmm's `self` is the bias, mm's is the left matrix.
  const at::Tensor* left = nullptr;
  const at::Tensor* self = nullptr;
  const at::Tensor* right = nullptr;
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const std::string& n = arguments[i].name();
    if (n == "mat1" || n == "batch1" || n == "mat" || n == "vec1") left = &args[i].toTensor();
    else if (n == "self") self = &args[i].toTensor();
    else if (!right && (n == "mat2" || n == "batch2" || n == "vec" || n == "tensor" || n == "vec2")) {
      right = &args[i].toTensor();
    }
  }
  if (left == nullptr) left = self;
  if (!left || !right || !left->defined() || !right->defined() || left->dim() == 0) return 0;
  // left is [..., M, K] (or [K]); right is [..., K, N] or [K].
  const int64_t k = left->size(-1);
  const int64_t rows = left->numel() / std::max<int64_t>(k, 1);
  const int64_t n = right->dim() >= 2 ? right->size(-1) : 1;
  return static_cast<uint64_t>(2 * rows * k * n);
}

void register_host_math_ops(torch::Library& library, const OpFamily& family,
                            std::initializer_list<const char*> base_names) {
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const char* base : base_names) {
    // The in-place form of an op is a base name of its own ("fill_" beside "fill").
    const std::string functional = std::string("aten::") + base;
    const std::string inplace = functional + "_";
    bool any = false;
    for (const auto& name : dispatcher.getAllOpNames()) {
      if (name.name != functional && name.name != inplace) continue;
      auto handle = dispatcher.findOp(name);
      if (!handle || !handle->hasSchema()) continue;
      const bool cpu_kernel =
          handle->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
          (family.composite_explicit_cpu &&
           handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd));
      if (!cpu_kernel) continue;
      if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
      if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
          !is_functional(handle->schema())) {
        continue;  // the in-place form of a structured op calls its .out overload on neuron
      }
      if (returns_view(handle->schema())) continue;  // views need real view kernels (Views.cpp)
      any = true;
      // A dedicated kernel registered before the family list (e.g. unboxed arithmetic) stays.
      if (handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
      register_overload(library, family, *handle);
    }
    if (!any) unregistered_names().push_back(functional);
  }
}

void register_host_math_overloads(torch::Library& library, const OpFamily& family,
                                  std::initializer_list<const char*> overloads) {
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const char* overload : overloads) {
    std::string full(overload);
    const size_t dot = full.find('.');
    const c10::OperatorName name("aten::" + full.substr(0, dot),
                                 dot == std::string::npos ? "" : full.substr(dot + 1));
    auto handle = dispatcher.findOp(name);
    if (!handle || !handle->hasSchema()) {
      unregistered_names().push_back(op_name(name));
      continue;
    }
    register_overload(library, family, *handle);
  }
}

}  // namespace torch_neuronx
