// torch_neuronx._C's view of the op-work table (core/OpWork.h), for compiled graphs: a program's
// work is asked of the table once per op of its graph at compile time
// (torch_neuronx/dynamo/program_work.py).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_neuronx {

// Adds _op_work(func, args, kwargs, outputs, inside_program).
void init_op_work_bindings(pybind11::module& m);

}  // namespace torch_neuronx
