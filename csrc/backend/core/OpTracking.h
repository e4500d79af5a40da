// Which ATen ops ran on neuron, and which of them went to the CPU fallback: what
// torch_neuronx.get_executed_ops() / get_fallback_ops() / clear_op_tracking() report.
// Native kernels are tracked by the launch path (nrtsim's execution trace); the fallback records
// itself here.
#pragma once

#include <string>
#include <vector>

namespace torch_neuronx {

// Records a fallback of `op` ("aten::name.overload"); returns true the first time for that op.
bool record_fallback(const std::string& op);
std::vector<std::string> fallback_ops();
// Native kernels in first-launch order, then the fallbacks not among them in first-seen order.
std::vector<std::string> executed_ops();
void clear_op_tracking();

}  // namespace torch_neuronx
