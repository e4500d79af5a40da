#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_neuronx::distributed {

// Adds torch_neuronx._C._distributed.ProcessGroupNeuron (when torch.distributed is available).
void init_distributed_bindings(pybind11::module& m);

}  // namespace torch_neuronx::distributed
