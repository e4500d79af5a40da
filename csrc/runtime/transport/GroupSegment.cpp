#include "runtime/transport/GroupSegment.h"

#include <utility>

namespace nrtsim::transport {

namespace {
// header | controls | slots | rings | ring data, each part page-aligned but the rings.
size_t controls_offset() { return kPage; }
size_t slots_offset(int size) {
  return align_up(controls_offset() + sizeof(RankControl) * size, kPage);
}
size_t rings_offset(int size, size_t slot) { return slots_offset(size) + slot * size; }
size_t ring_data_offset(int size, size_t slot) {
  return align_up(rings_offset(size, slot) + sizeof(Ring) * size * size, kPage);
}
}  // namespace

size_t GroupSegment::total_bytes(int size, size_t slot_bytes, size_t channel_bytes) {
  return ring_data_offset(size, slot_bytes) + channel_bytes * size * size;
}

GroupSegment::GroupSegment(ShmSegment segment, int rank, int size, size_t slot_bytes,
                           size_t channel_bytes)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      channel_bytes_(channel_bytes) {
  char* base = segment_.data();
  header_ = reinterpret_cast<GroupHeader*>(base);
  controls_ = reinterpret_cast<RankControl*>(base + controls_offset());
  slots_ = base + slots_offset(size);
  rings_ = reinterpret_cast<Ring*>(base + rings_offset(size, slot_bytes));
  ring_data_ = base + ring_data_offset(size, slot_bytes);
}

}  // namespace nrtsim::transport
