#include "runtime/NeuronCore.h"

#include <string>

#include "runtime/Error.h"

namespace nrtsim {

NeuronCore::NeuronCore(Runtime& runtime, const LogicalCore& info, const CoreModel& model,
                       const CoreLinks& links)
    : runtime_(runtime),
      info_(info),
      hbm_(info.device_index, info.hbm_capacity),
      clock_(model, links) {
  streams_.push_back(std::make_unique<Stream>(*this, kDefaultStreamId, 0));
  for (uint32_t i = 0; i < kPoolSize; ++i) {
    streams_.push_back(std::make_unique<Stream>(*this, 1 + i, 0));
  }
  for (uint32_t i = 0; i < kPoolSize; ++i) {
    streams_.push_back(std::make_unique<Stream>(*this, 1 + kPoolSize + i, -1));
  }
}

Stream& NeuronCore::stream(uint32_t id) {
  if (id >= streams_.size()) {
    throw Error(ErrorCode::kInvalidArgument, "neuron:" + std::to_string(info_.device_index) +
                                                 " has no stream with id " + std::to_string(id));
  }
  return *streams_[id];
}

Stream& NeuronCore::pool_stream(int priority) {
  if (priority < 0) {
    return *streams_[1 + kPoolSize + next_high_.fetch_add(1) % kPoolSize];
  }
  return *streams_[1 + next_normal_.fetch_add(1) % kPoolSize];
}

void NeuronCore::synchronize() {
  for (auto& s : streams_) s->synchronize();
}

}  // namespace nrtsim
