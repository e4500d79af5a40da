// The foreach (multi-tensor) elementwise ops that torch.optim's default implementations call, as
// kernels of their own: one pass over every tensor of the lists (ForeachKernels.cpp).
#pragma once

#include <torch/library.h>

#include "backend/core/BoxedHostMath.h"

namespace torch_neuronx {

// Registers the kernels with `library` (aten, PrivateUse1). Calls a kernel does not serve run as
// `family`'s host-math kernel. Register them before the family's host-math ops, which then keep
// these kernels.
void register_foreach_kernels(torch::Library& library, const OpFamily& family);

}  // namespace torch_neuronx
