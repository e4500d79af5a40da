// Caching allocator over nrtsim HBM, with CUDA's statistics so that torch.accelerator.memory_*
// and torch.neuron.memory_* report the same numbers.
//
// Freed blocks stay reserved and are reused for later requests of a similar size; HBM is only
// given back by empty_cache() or when an allocation would otherwise not fit. Requests below
// 1 MiB are served from the "small" pool, the rest from the "large" pool (the split CUDA's stats
// and TorchNeuron's allocator guide describe).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

namespace torch_neuronx {

c10::DeviceAllocator& caching_allocator();

// Whether `ptr` is the start of a live block the caching allocator handed out.
bool is_caching_allocator_block(void* ptr);

}  // namespace torch_neuronx
