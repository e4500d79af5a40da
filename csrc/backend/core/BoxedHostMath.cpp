#include "backend/core/BoxedHostMath.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/core/BoxedArgs.h"
#include "backend/core/DeviceCheck.h"
#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"
#include "runtime/LaunchRecord.h"

namespace torch_neuronx {

namespace {

class HostMathKernel final : public c10::OperatorKernel {
 public:
  HostMathKernel(const OpFamily& family, const std::string& name,
                 LaunchKind kind = LaunchKind::kKernel)
      : family_(family), name_(nrtsim::intern(name)), kind_(kind) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const c10::FunctionSchema& schema = op.schema();
    const auto& arguments = schema.arguments();
    const size_t first = stack->size() - arguments.size();

    const std::optional<c10::Device> found = check_devices(name_, schema, *stack, first);
    const c10::Device device = found.value_or(c10::Device(c10::DeviceType::PrivateUse1));
    substitute_generators(schema, *stack, first, device);

    Kernel kernel(name_, device, family_.engine, kind_);
    // A tensor passed twice (an in-place op's self as its own out=) gets one host view
    // (CallHostViews), writable if either use writes.
    std::vector<const c10::TensorImpl*> written;
    for (size_t i = 0; i < arguments.size(); ++i) {
      const auto* alias = arguments[i].alias_info();
      if (alias == nullptr || !alias->isWrite()) continue;
      const c10::IValue& value = (*stack)[first + i];
      if (value.isTensor()) written.push_back(value.toTensor().unsafeGetTensorImpl());
    }
    CallHostViews views;
    auto swap = [&](const at::Tensor& t, bool writable, bool out_argument) -> at::Tensor {
      // Every tensor the CPU code reads counts, CPU scalars included; an out= argument's old
      // contents are not read.
      if (t.defined() && !out_argument) kernel.reads(t);
      writable = writable || std::find(written.begin(), written.end(),
                                       t.unsafeGetTensorImpl()) != written.end();
      return views.view(t, writable);
    };
    for (size_t i = 0; i < arguments.size(); ++i) {
      c10::IValue& value = (*stack)[first + i];
      const auto* alias = arguments[i].alias_info();
      const bool writable = alias != nullptr && alias->isWrite();
      const bool out_argument = arguments[i].is_out();
      if (value.isTensor()) {
        value = swap(value.toTensor(), writable, out_argument);
      } else if (value.isTensorList()) {
        c10::List<at::Tensor> views;
        for (const auto& t : value.toTensorVector()) views.push_back(swap(t, writable, out_argument));
        value = views;
      } else if (value.isOptionalTensorList()) {
        c10::List<std::optional<at::Tensor>> views;
        for (const auto& t : value.toOptionalTensorVector()) {
          views.push_back(t.has_value() ? std::optional<at::Tensor>(swap(*t, writable, out_argument))
                                        : t);
        }
        value = views;
      }
    }
    kernel.ops(family_.flops(schema, KernelArgs(stack->data() + first, arguments.size())));

    kernel.run([&] {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
      for (const auto& s : views.entries()) {
        if (s.resizable) {
          adopt_host_view(s.view, s.original);
          kernel.writes(s.original);
        }
      }
      for (size_t i = first; i < stack->size(); ++i) {
        c10::IValue& result = (*stack)[i];
        if (result.isTensor()) {
          result = to_neuron(kernel, result.toTensor(), views);
        } else if (result.isTensorList()) {
          c10::List<at::Tensor> moved;
          for (const auto& t : result.toTensorVector()) moved.push_back(to_neuron(kernel, t, views));
          result = moved;
        }
      }
    });
  }

 private:
  // A result of the CPU kernel, as the neuron tensor it stands for.
  // A fresh result counts as written; a returned argument was counted as its argument.
  static at::Tensor to_neuron(Kernel& kernel, const at::Tensor& t, const CallHostViews& views) {
    if (!t.defined() || is_neuron(t)) return t;
    for (const auto& s : views.entries()) {
      if (t.is_same(s.view)) return s.original;
    }
    for (const auto& s : views.entries()) {
      // An alias of an argument the schema did not announce: alias the neuron tensor likewise.
      if (t.storage().data() != nullptr && t.storage().data() == s.view.storage().data()) {
        return s.original.as_strided(t.sizes(), t.strides(), t.storage_offset());
      }
    }
    if (!t.device().is_cpu()) return t;
    // A fresh result of a functional op (allocated in HBM by the launch's HostAllocationsInHbm
    // scope): it becomes the neuron tensor, without a copy.
    return kernel.result(t);
  }

  OpFamily family_;
  const char* name_;  // interned
  LaunchKind kind_;
};

// No argument is written. The functional form of a structured op gets a kernel of its own: run on
// the host, the CPU kernel picks the output strides as on the CPU and the result moves to HBM
// with them, without the second dispatch of PyTorch's generic wrapper.
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

// Overload name -> the family that lists it (registered or kept as a dedicated kernel).
std::unordered_map<std::string, OpFamily>& families_by_op() {
  static auto* map = new std::unordered_map<std::string, OpFamily>();
  return *map;
}

}  // namespace

void run_host_math(const OpFamily& family, const c10::OperatorHandle& op,
                   torch::jit::Stack* stack, LaunchKind kind) {
  HostMathKernel(family, op_name(op.operator_name()), kind)(op, c10::DispatchKeySet(), stack);
}

const OpFamily* find_op_family(const std::string& op) {
  auto it = families_by_op().find(op);
  return it == families_by_op().end() ? nullptr : &it->second;
}

std::vector<std::string>& unregistered_names() {
  static auto* names = new std::vector<std::string>();
  return *names;
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
      families_by_op().emplace(op_name(handle->operator_name()), family);
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
    families_by_op()[op_name(handle->operator_name())] = family;
    register_overload(library, family, *handle);
  }
}

}  // namespace torch_neuronx
