// torch_neuronx._C's bindings for NKI kernels: building a specialised kernel for the runtime's
// interpreter, running it standalone on host memory, and launching it on a neuron device as one
// launch record of kind nki_kernel.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_neuronx {

void init_nki_bindings(pybind11::module& m);

}  // namespace torch_neuronx
