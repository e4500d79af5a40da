#include "runtime/Stream.h"

#include "runtime/NeuronCore.h"

namespace nrtsim {

Stream::Stream(NeuronCore& core, uint32_t id, int priority)
    : core_(core), device_index_(core.device_index()), id_(id), priority_(priority) {}

}  // namespace nrtsim
