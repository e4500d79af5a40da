#include "backend/core/BoxedArgs.h"

#include <c10/util/Exception.h>

#include "backend/core/Generator.h"

namespace torch_neuronx {

std::string op_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

namespace {
bool is_generator(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  const auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

}  // namespace

// An omitted generator (None) means the device's default generator, as on CUDA: left as None,
// the CPU kernel would draw from the CPU default generator, and torch.neuron.manual_seed and
// set_rng_state would not govern the op.
void substitute_generators(const c10::FunctionSchema& schema, torch::jit::Stack& stack,
                           size_t first, std::optional<c10::Device> device) {
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && first + i < stack.size(); ++i) {
    if (!is_generator(args[i])) continue;
    c10::IValue& value = stack[first + i];
    std::optional<at::Generator> generator;
    if (value.isGenerator() && value.toGenerator().defined()) {
      generator = value.toGenerator();
      if (generator->device().type() != c10::DeviceType::PrivateUse1) continue;
    }
    // How many values the op draws is unknown here; reserve a generous block so successive
    // calls never overlap for realistic sizes.
    value = c10::IValue(
        host_generator_for(generator, device ? device->index() : -1, uint64_t{1} << 32));
  }
}

}  // namespace torch_neuronx
