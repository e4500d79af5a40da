// torch_neuronx._C's bindings for compiled programs (torch.compile(backend="neuron")).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_neuronx {

// Adds _launch_program: a compiled graph's CPU code run as one launch record of kind program;
// _program_host_generator: the neuron generator's stream for random ops inside a program.
void init_compiler_bindings(pybind11::module& m);

}  // namespace torch_neuronx
