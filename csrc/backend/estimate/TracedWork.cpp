#include "backend/estimate/TracedWork.h"

#include "backend/core/BoxedArgs.h"

namespace torch_neuronx::estimate {

uint64_t matmul_tile_ops(int64_t batch, int64_t m, int64_t k, int64_t n) {
  return nrtsim::matmul_tile_flops(default_tensor_tiles(), batch, m, k, n);
}

TracedWork traced_work(const c10::OperatorHandle& op, const torch::jit::Stack& arguments,
                       const std::vector<at::Tensor>& outputs) {
  const OpWork w = op_work(op, KernelArgs(arguments.data(), arguments.size()), outputs,
                           default_tensor_tiles());
  TracedWork result;
  result.op.op = op_name(op.operator_name());
  result.op.kind = w.kind;
  result.op.work = w.work;
  result.op.tensor_tile_ops = w.tensor_tile_ops;
  result.op.attention = w.attention;
  result.source = w.source;
  return result;
}

}  // namespace torch_neuronx::estimate
