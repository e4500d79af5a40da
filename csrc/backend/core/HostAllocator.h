// Pinned (page-locked) host memory for neuron: what Tensor.pin_memory() and DataLoader's
// pin_memory=True allocate. On nrtsim every host page is equally reachable, so "pinned" means
// "allocated here and known to be pinned"; the bookkeeping is what is_pinned() needs.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace torch_neuronx {

at::HostAllocator& host_allocator();
bool is_pinned(const void* ptr);

}  // namespace torch_neuronx
