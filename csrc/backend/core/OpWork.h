// The one table of op work: for each ATen op a NeuronCore runs, the engine it occupies, which of
// its tensors it reads and writes, its FLOP model (FlopModels.h) and its tile model
// (runtime/TensorTiles.h). It is the single answer to "what work is this op": eager kernels
// describe their launches with it (BoxedHostMath, the dedicated kernels through the work::
// builders below), the estimate's tracer derives a traced op's work from it
// (backend/estimate), and a compiled graph asks it once per FX node at compile time
// (torch_neuronx/dynamo/program_work.py through _C._op_work). Pricing that work is the runtime's
// (EngineModel.h); nobody else counts FLOPs or bytes.
//
// The table has two kinds of rows:
//  - op families: the host-math kernels' families (ops/*.cpp register their ops with
//    register_host_math_ops, which enters each overload here): one engine, one FLOP model, one
//    read/write rule and optionally a tile model for every op of the family;
//  - dedicated rules, in OpWork.cpp, for ops whose work depends on more than a family's model:
//    fused attention, convolution, grouped matmul, fills, copies. Their eager kernels build their
//    Cost with the same work:: functions the table uses.
// An op the table does not know counts one Vector-engine pass over its largest tensor (source
// kDefault, listed by the estimate's reports); views and allocations count nothing (kNone).
//
// Engines, from the hardware (shared/research/trainium_nki.md §1.2, §4.4): the Scalar engine
// (ACT) evaluates functions through its lookup tables (exp, log, tanh, sigmoid, erf, gelu, sqrt,
// ...); the Vector engine's ALU does arithmetic, comparisons and selection, including pow,
// reciprocal, abs, relu, min/max (so piecewise-linear functions such as hardswish, and the
// backward of sigmoid and tanh, which only multiply the forward's result, are Vector work);
// GpSimd does indexing, sorting and random draws; DMA moves bytes.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <optional>
#include <string>

#include "backend/core/Cost.h"
#include "backend/core/FlopModels.h"
#include "runtime/LaunchRecord.h"
#include "runtime/TensorTiles.h"

namespace torch_neuronx {

// Tensor-engine FLOPs a call occupies the engine for, tile padding included.
using TileModel = uint64_t (*)(const nrtsim::TensorTiles& tiles, const c10::FunctionSchema& schema,
                               KernelArgs args);

// Which tensors of a call count as read. Every tensor a call produces or writes counts as written.
enum class Access : uint8_t {
  kReadsInputs,     // every tensor argument but out= ones (an in-place self is read and written)
  kIgnoresSelf,     // as above, but `self` is not read: its values do not matter (fills)
  // An indexed write (index_copy, _index_put_impl_): written in place (an in-place self, or out=
  // self's storage, as the in-place form runs), only the indexed rows move: the source and the
  // indices are read and the source's bytes written; self's other rows are neither read nor
  // written (a KV cache's update costs a token's rows, not the cache). The functional form
  // copies self into a fresh result: kReadsInputs.
  kWritesIndexedRows,
};

// For an op of access kWritesIndexedRows: the rows it writes (index_copy's `source`,
// index_put's `values`) when it writes them into self's own storage; nullptr otherwise.
const at::Tensor* rows_written_in_place(const c10::FunctionSchema& schema, KernelArgs args);

struct OpFamily {
  const char* family;  // for messages: "elementwise", "reduction", ...
  nrtsim::Engine engine;
  FlopModel flops;
  // Also take ops whose CPU implementation is a CompositeExplicitAutograd kernel (the foreach
  // ops: on the host their per-tensor loop then runs without per-tensor neuron dispatch).
  bool composite_explicit_cpu = false;
  Access access = Access::kReadsInputs;
  TileModel tiles = nullptr;  // Tensor-engine families: their tile occupancy
};

// Enters `overload` ("aten::add.Tensor") as an op of `family` (register_host_math_* do).
void add_op_family(const std::string& overload, const OpFamily& family);
// The family of `overload`, or nullptr.
const OpFamily* find_op_family(const std::string& overload);
// Whether `overload` has a dedicated rule (attention, convolution, grouped matmul, fill, copy).
bool has_dedicated_rule(const std::string& overload);

// Where a call's work came from.
enum class WorkSource : uint8_t { kFamily, kKernel, kCopy, kNone, kDefault };
const char* work_source_name(WorkSource source);  // "family", "kernel", "copy", "none", "default"

struct OpWork {
  nrtsim::Work work;
  nrtsim::LaunchKind kind = nrtsim::LaunchKind::kKernel;
  // Tensor-engine FLOPs the call occupies the engine for on a core of the given tile geometry
  // (>= work[kTensor].ops; equal when the shapes fill whole tiles).
  uint64_t tensor_tile_ops = 0;
  bool attention = false;  // scaled dot-product attention, forward or backward
  WorkSource source = WorkSource::kDefault;
};

// The work of one call of `op`: `args` are its arguments in schema order (as a boxed kernel sees
// them; tensors may be fake or meta: only shapes, strides and dtypes are used), `outputs` the
// tensors it produced or wrote. `tiles`: the geometry tile occupancy is counted for.
OpWork op_work(const c10::OperatorHandle& op, KernelArgs args, c10::ArrayRef<at::Tensor> outputs,
               const nrtsim::TensorTiles& tiles);

// The tile geometry the backend counts tile occupancy with when no device is in question (a
// trace, a compile): the chip of the simulator's default instance (Trainium2), from the engine
// model file. Trainium1's is the same; Trainium3 streams wider moving tiles (4096 columns), which
// only changes matmuls whose moving size leaves a remainder under 64 columns past a multiple of
// 512.
const nrtsim::TensorTiles& default_tensor_tiles();

// The tile model of the matmul family (mm, bmm, addmm, baddbmm, ... found by argument name).
uint64_t matmul_tiles_by_schema(const nrtsim::TensorTiles& tiles, const c10::FunctionSchema& schema,
                                KernelArgs args);

// The dedicated rules, as their eager kernels use them: a Cost with what the call reads and the
// arithmetic it does. The caller adds the tensors it writes (Kernel::result or Cost::writes).
namespace work {

// Fused attention (q, k, v [B, H, L, E]; an additive mask): QK^T and PV on the Tensor engine at
// q's number format (a float32 mask does not make the matmuls float32).
Cost attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
               const std::optional<at::Tensor>& mask);
// Its backward: grad_out, q, k, v, out, logsumexp and the mask read; the mask's gradient counted
// when it is requested.
Cost attention_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                        const at::Tensor& v, const at::Tensor& mask, const at::Tensor& out,
                        const at::Tensor& logsumexp, bool mask_gradient);
// A convolution: input, weight and bias read, on the Tensor engine.
Cost convolution(const at::Tensor& input, const at::Tensor& weight,
                 const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                 at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed);
// Its backward: grad_output, input and weight read; the input and weight gradients counted
// only when requested (a NeuronCore computes what convolution_backward's output mask asks).
Cost convolution_backward(const at::Tensor& grad_output, const at::Tensor& input,
                          const at::Tensor& weight, at::IntArrayRef stride,
                          at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                          bool grad_input, bool grad_weight);

}  // namespace work
}  // namespace torch_neuronx
