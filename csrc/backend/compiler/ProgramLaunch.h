// torch_neuronx._C's bindings for compiled programs (torch.compile(backend="neuron")).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_neuronx {

// Adds _ProgramLauncher: a compiled graph's CPU code run as one launch record of kind program.
void init_compiler_bindings(pybind11::module& m);

}  // namespace torch_neuronx
