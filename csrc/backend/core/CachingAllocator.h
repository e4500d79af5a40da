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

}  // namespace torch_neuronx
