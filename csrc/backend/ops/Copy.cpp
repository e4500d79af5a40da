// Copies between neuron and the host and between neuron tensors: _copy_from (what Tensor.copy_
// and .to() reach for a non-CPU tensor) and _copy_from_and_resize (the CPU fallback's way back).
//
// A same-dtype copy between tensors with identical dense layouts is one DMA transfer of the bytes.
// Anything else (dtype conversion, different strides, broadcasting) is a strided DMA: ATen's CPU
// copy kernel run on host views of the device buffers, launched as one kernel.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "backend/core/HostView.h"
#include "backend/core/KernelLaunch.h"
#include "backend/core/NeuronStream.h"
#include "runtime/Copy.h"

namespace torch_neuronx {
namespace {

constexpr const char* kCopyOp = "aten::_copy_from";

bool is_neuron(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// The tensors cover the same element positions in one contiguous run of bytes each.
bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.is_non_overlapping_and_dense() && !a.is_conj() && !b.is_conj() && !a.is_neg() &&
         !b.is_neg();
}

// The first byte of a dense tensor's span: strides are never negative, so it is the element at
// the storage offset.
char* span_start(const at::Tensor& t) {
  return static_cast<char*>(t.storage().mutable_data()) +
         t.storage_offset() * static_cast<int64_t>(t.itemsize());
}

nrtsim::CopyKind kind_of(const at::Tensor& src, const at::Tensor& dst) {
  if (is_neuron(src) && is_neuron(dst)) return nrtsim::CopyKind::kDeviceToDevice;
  return is_neuron(dst) ? nrtsim::CopyKind::kHostToDevice : nrtsim::CopyKind::kDeviceToHost;
}

LaunchKind launch_kind_of(nrtsim::CopyKind kind) {
  switch (kind) {
    case nrtsim::CopyKind::kHostToDevice: return LaunchKind::kCopyHostToDevice;
    case nrtsim::CopyKind::kDeviceToHost: return LaunchKind::kCopyDeviceToHost;
    case nrtsim::CopyKind::kDeviceToDevice: return LaunchKind::kCopyDeviceToDevice;
  }
  return LaunchKind::kCopyDeviceToDevice;
}

at::Tensor as_host(const at::Tensor& t) { return is_neuron(t) ? host_view(t) : t; }

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  // `self` is the source. Copies are host-synchronous on nrtsim, so non_blocking only changes
  // when the host may look at the result: immediately, in both cases.
  TORCH_CHECK(is_neuron(self) || is_neuron(dst), "neuron _copy_from called with ", self.device(),
              " -> ", dst.device());
  TORCH_CHECK(self.device().is_cpu() || is_neuron(self),
              "copy between neuron and ", self.device(), " is not supported; go through the CPU");
  TORCH_CHECK(dst.device().is_cpu() || is_neuron(dst),
              "copy between neuron and ", dst.device(), " is not supported; go through the CPU");
  if (dst.numel() == 0) return dst;
  // ATen's copy_ hands neuron copies over before its TensorIterator would check for overlap, so
  // the checks CPU and CUDA make are made here. Without them a copy between overlapping views of
  // one storage (x.copy_(x.t())) silently produced wrong numbers, or memcpy'd overlapping ranges.
  at::assert_no_internal_overlap(dst);
  if (is_neuron(self) && is_neuron(dst)) at::assert_no_partial_overlap(dst, self);

  // The copy runs in the stream order of the device it writes (or reads, for device->host).
  const at::Tensor& device_side = is_neuron(dst) ? dst : self;
  const c10::DeviceIndex device = device_side.device().index();
  const nrtsim::CopyKind kind = kind_of(self, dst);

  if (same_dense_layout(self, dst)) {
    nrtsim::Stream& stream = current_stream_object(device);
    const CurrentDeviceScope scope(device);
    runtime_call([&] {
      nrtsim::copy(stream, span_start(dst), span_start(self), bytes_of_elements(dst), kind,
                   kCopyOp);
    });
    return dst;
  }
  // A strided DMA (with dtype conversion, broadcasting): what it reads and writes, by direction.
  Kernel kernel(kCopyOp, device_side.device(), Engine::kDma, launch_kind_of(kind));
  kernel.reads(self).writes(dst).run([&] { as_host(dst).copy_(as_host(self)); });
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    TORCH_CHECK(dst.numel() == 0 || dst.is_contiguous(),
                "_copy_from_and_resize: cannot resize a non-contiguous tensor of shape ",
                dst.sizes(), " to ", self.sizes());
    dst.resize_(self.sizes());
    // The CPU result's layout, as an out= the CPU kernel resized gets it: TensorIterator gives a
    // resized output its inputs' memory order (a permuted input makes a permuted out=).
    if (!self.is_contiguous() && self.is_non_overlapping_and_dense()) {
      dst.as_strided_(self.sizes(), self.strides(), dst.storage_offset());
    }
  }
  return copy_from(self, dst, false);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
}

// The copies resolve the conjugate and negative bits themselves (host views carry them, and the
// CPU copy applies them). Without these fallthroughs the Conjugate/Negative fallback would
// materialise a conj() or neg-view source with clone -> copy_ -> _copy_from, recursing until the
// stack overflows: .cpu() of x.conj() crashed the process.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace
}  // namespace torch_neuronx
