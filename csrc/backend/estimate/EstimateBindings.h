// Python bindings of the projection: a trace of ATen ops turned into per-rank work (TracedWork.h)
// and the torch-free cost model over it (runtime/cost/Projection.h).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_neuronx {

void init_estimate_bindings(pybind11::module& m);

}  // namespace torch_neuronx
