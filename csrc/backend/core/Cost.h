// The one cost builder: the work a launch asks of a NeuronCore, derived from the actual tensors
// it touches. Bytes read are the bytes an input occupies in memory (a broadcast, stride-0
// dimension is read once, not once per use; a host scalar is an instruction operand and reads
// none); bytes written are the output's elements; the number format the engines stream is the
// widest floating dtype read. FLOP counts come from FlopModels.h; which tensors an op reads and
// writes, and its FLOP model, from the op-work table (OpWork.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>

#include "runtime/LaunchRecord.h"

namespace torch_neuronx {

using nrtsim::Engine;

// Bytes of memory an access to `t` touches: its distinct elements times their size. 0 for an
// undefined tensor.
uint64_t bytes_in_memory(const at::Tensor& t);
// Bytes a write of every element of `t` stores.
uint64_t bytes_of_elements(const at::Tensor& t);
nrtsim::Precision precision_of(c10::ScalarType dtype);

class Cost {
 public:
  explicit Cost(Engine engine) : engine_(engine) {}

  Cost& reads(const at::Tensor& t);
  Cost& reads(c10::ArrayRef<at::Tensor> ts);
  Cost& writes(const at::Tensor& t);
  Cost& writes(c10::ArrayRef<at::Tensor> ts);
  Cost& ops(uint64_t n) { return ops(engine_, n); }  // on the launch's engine
  Cost& ops(Engine engine, uint64_t n);
  Cost& read_bytes(uint64_t n);
  Cost& write_bytes(uint64_t n);
  // The engines stream `t`'s number format, whatever else the launch reads (attention's float32
  // mask and statistics do not make its bf16 matmuls float32).
  Cost& number_format_of(const at::Tensor& t);

  Engine engine() const { return engine_; }
  nrtsim::Work& work() { return work_; }
  const nrtsim::Work& work() const { return work_; }

 private:
  Engine engine_;
  nrtsim::Work work_;
  int precision_bits_ = 0;  // widest floating type read so far (0: none)
  bool precision_fixed_ = false;  // number_format_of() decided it
};

}  // namespace torch_neuronx
