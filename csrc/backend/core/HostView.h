// CPU code over device memory: the one service through which eager kernels and compiled programs
// run ATen's CPU code on neuron tensors. nrtsim's HBM is host memory, so the CPU code works on
// host views (CPU tensors aliasing a neuron tensor's bytes, sizes, strides, offset) with no copy,
// allocates its fresh results in HBM (HostAllocationsInHbm), and hands them back as neuron
// tensors (move_to_hbm for one result, HostResults for a program's several): still our kernel or
// program, launched through our path.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace torch_neuronx {

// --- host views ---------------------------------------------------------------------------------

// A CPU tensor over an empty storage that owns nothing: what every host view is made of, built
// once and pointed at a neuron tensor (point_at) for each use.
at::Tensor empty_host_view();

// Points `view` (from empty_host_view, held by the caller alone) at `neuron_tensor`: its bytes
// through the view's storage, which does not own them (the neuron tensor keeps the memory alive
// while the CPU code runs), its dtype, sizes, strides, offset and conjugate/negative bits.
void point_at(const at::Tensor& view, const at::Tensor& neuron_tensor);

// A host view from this thread's pool. With `resizable` set the CPU code may resize it: its
// storage then grows into fresh HBM of the tensor's device (adopt_host_view carries it over).
//
// Views of one neuron storage that are alive at the same time on a thread share one host
// storage, as the neuron tensors share theirs: the CPU code then sees the aliasing the CPU would
// see, and its memory-overlap checks (at::assert_no_internal_overlap, assert_no_partial_overlap,
// assert_no_overlap) raise exactly where they raise on the CPU, e.g. for x[5:15].add_(x[0:10]) or
// torch.add(d[:3], 2, out=d[1:4]). With a storage of its own per view the CPU code could not
// tell, and computed order-dependent values.
at::Tensor host_view(const at::Tensor& neuron_tensor, bool resizable = false);
std::optional<at::Tensor> host_view(const std::optional<at::Tensor>& neuron_tensor);
std::vector<at::Tensor> host_views(at::TensorList neuron_tensors);

// After CPU code ran on a resizable host view of `original`: carry a resize (new HBM block,
// sizes, strides, offset) over to the neuron tensor.
void adopt_host_view(const at::Tensor& view, const at::Tensor& original);

// The host views of one call's neuron arguments, one per tensor: a tensor passed twice (an
// in-place op's self as its own out=: ldexp_ runs mul.out(self, 2**other, out=self),
// nan_to_num_ runs nan_to_num.out(self, out=self)) is the same view twice. The CPU code then sees
// one tensor where the CPU sees one, and its checks follow: an out= that is also an input is not
// resized ("output with shape [] doesn't match the broadcast shape [1]"), and copying a tensor
// onto itself is no overlap. With two views of one storage it resized self, or refused the copy.
class CallHostViews {
 public:
  struct Entry {
    at::Tensor original;  // the neuron tensor
    at::Tensor view;
    bool resizable;
  };

  // `t`'s host view in this call, made on its first use with `resizable` as host_view takes it
  // (the first use decides: pass the out= or written argument first); an undefined or non-neuron
  // tensor passes through.
  at::Tensor view(const at::Tensor& t, bool resizable = false);

  const c10::SmallVector<Entry, 4>& entries() const { return entries_; }

 private:
  c10::SmallVector<Entry, 4> entries_;
};

// --- fresh results in HBM -----------------------------------------------------------------------

// While alive, CPU tensors this thread allocates are placed in HBM of `device`: wrapped around a
// kernel's or a program's CPU code, its fresh results are already device memory.
class HostAllocationsInHbm {
 public:
  explicit HostAllocationsInHbm(c10::DeviceIndex device);
  ~HostAllocationsInHbm();
  HostAllocationsInHbm(const HostAllocationsInHbm&) = delete;
  HostAllocationsInHbm& operator=(const HostAllocationsInHbm&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// Whether a CPU tensor's storage owns an HBM block (its CPU code allocated it inside a
// HostAllocationsInHbm scope): the block can become a neuron storage without a copy. A host
// view's storage owns nothing and answers false.
bool owns_hbm_block(const c10::StorageImpl& host_storage);

// A neuron tensor on `device` with the contents, sizes and strides of `host_tensor`: how a kernel
// that computed a fresh result with ATen's CPU math hands it over. A result that owns its HBM
// block alone is taken over without a copy; anything else is copied (its extent only).
at::Tensor move_to_hbm(const at::Tensor& host_tensor, c10::Device device);

// What a compiled program's CPU code returned, turned into the program's outputs. Outputs that
// share a storage keep sharing one (AOTAutograd regenerates views of outputs from their base), an
// output over an input's bytes becomes the same alias of the neuron input, and a fresh result in
// HBM is taken over without a copy when nothing but the outputs holds its block (else its
// storage is copied whole, so the sharing survives). Per call it costs work in the number of
// outputs; the inputs are looked up in a sorted vector (a decode step has ~50 inputs and one
// output).
class HostResults {
 public:
  // `inputs`: (host view data pointer, neuron storage) of each neuron input.
  HostResults(c10::Device device, std::vector<std::pair<const void*, c10::Storage>> inputs);

  // Whether `host` lies over one of the inputs' bytes.
  bool aliases_input(const at::Tensor& host) const;
  // Before any to_neuron: each result that will be handed over, so a block held only by results
  // is known to be free to take.
  void count_user(const at::Tensor& host);
  at::Tensor to_neuron(const at::Tensor& host);
  // A result the program produces on the CPU (a .cpu() inside the graph): one its CPU code put
  // in HBM is copied to host memory; CPU inputs it aliases stay as they are.
  at::Tensor to_cpu(const at::Tensor& host);

 private:
  const c10::Storage* input_storage(const void* data) const;

  c10::Device device_;
  std::vector<std::pair<const void*, c10::Storage>> inputs_;
  std::unordered_map<c10::StorageImpl*, std::unordered_set<c10::TensorImpl*>> users_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> host_copies_;
};

}  // namespace torch_neuronx
