// The one cost builder: the work a launch asks of a NeuronCore, derived from the actual tensors
// it touches. Bytes read are the bytes an input occupies in memory (a broadcast, stride-0
// dimension is read once, not once per use); bytes written are the output's elements; the
// number format the engines stream is the widest floating dtype read. FLOP counts come from
// FlopModels.h.
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

  Engine engine() const { return engine_; }
  nrtsim::Work& work() { return work_; }
  const nrtsim::Work& work() const { return work_; }

 private:
  Engine engine_;
  nrtsim::Work work_;
  int precision_bits_ = 0;  // widest floating type read so far (0: none)
};

}  // namespace torch_neuronx
