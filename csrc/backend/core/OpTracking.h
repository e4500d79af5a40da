// Which ATen ops ran on neuron, and which of them went to the CPU fallback: what
// torch_neuronx.get_executed_ops() / get_fallback_ops() / clear_op_tracking() report, with
// TorchNeuron's semantics. An observer of launch records, registered when the extension loads
// (op tracking is on by default, as in TorchNeuron); a second observer keeps the per-op kernel
// totals behind torch_neuronx.kernel_trace().
#pragma once

#include <string>
#include <vector>

#include "runtime/LaunchTotals.h"

namespace torch_neuronx {

std::vector<std::string> fallback_ops();
// Every ATen op that yielded a record, in first-launch order (native kernels and fallbacks).
std::vector<std::string> executed_ops();
// Forgets both lists; the kernel trace is separate (kernel_totals().clear()).
void clear_op_tracking();

nrtsim::LaunchTotals& kernel_totals();

}  // namespace torch_neuronx
