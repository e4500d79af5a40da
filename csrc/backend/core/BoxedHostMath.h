// Boxed host-math kernels: whole op families registered at once. nrtsim's HBM is host memory, so
// the fastest correct kernel for most ops is the CPU kernel run in place: the op's neuron tensor
// arguments are swapped for host views (HostView.h) and it is redispatched to the CPU key inside
// one launch on the op's device (KernelLaunch.h). Nothing is copied in or out; a write argument
// (out=, in-place self) that the CPU kernel resizes gets its new storage from HBM, and fresh
// results are allocated in HBM.
//
// Each family (ops/*.cpp) names the engine its ops occupy on a NeuronCore and its FLOP model
// (FlopModels.h).
#pragma once

#include <torch/library.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "backend/core/FlopModels.h"
#include "runtime/Engine.h"
#include "runtime/LaunchRecord.h"

namespace torch_neuronx {

struct OpFamily {
  const char* family;               // for messages: "elementwise", "reduction", ...
  nrtsim::Engine engine;
  FlopModel flops;
  // Also take ops whose CPU implementation is a CompositeExplicitAutograd kernel (the foreach
  // ops: on the host their per-tensor loop then runs without per-tensor neuron dispatch).
  bool composite_explicit_cpu = false;
};

// Registers every overload of each base name (e.g. "add" -> add.out, add_.Tensor, ...) that has a
// CPU kernel, except overloads PyTorch already maps onto another neuron kernel (composites, and
// the in-place forms of structured ops, which call their .out overload on neuron).
void register_host_math_ops(torch::Library& library, const OpFamily& family,
                            std::initializer_list<const char*> base_names);

// Registers exactly these overloads ("name.overload" or "name"), for ops whose other overloads
// need a dedicated kernel.
void register_host_math_overloads(torch::Library& library, const OpFamily& family,
                                  std::initializer_list<const char*> overloads);

// Runs one call of `op` as `family`'s host-math kernel does: the general case behind a dedicated
// kernel that serves only some calls of its op itself (the foreach kernels), and the CPU
// fallback's way with arguments that share memory (CpuFallback.cpp), as a launch of `kind`.
void run_host_math(const OpFamily& family, const c10::OperatorHandle& op,
                   torch::jit::Stack* stack, nrtsim::LaunchKind kind = nrtsim::LaunchKind::kKernel);

// The family whose list names the overload `op` ("aten::mm", "aten::add.Tensor"), or nullptr.
// The estimate (csrc/backend/estimate) derives a traced op's work from it, so that an op's work
// has one definition whether it runs or is only traced.
const OpFamily* find_op_family(const std::string& op);

// Names in the family lists that matched no registrable overload in this torch version (a stale
// list). Empty in a correct build; a test asserts that.
std::vector<std::string>& unregistered_names();

}  // namespace torch_neuronx
