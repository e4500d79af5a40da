// Broadcast. Slots: the root copies a step into its slot, the others copy it out. Mapped: the
// others copy the root's buffer straight into theirs (only the root's buffer must be mapped).
#include <algorithm>
#include <cstring>

#include "runtime/transport/Algorithms.h"
#include "runtime/transport/StreamingCopy.h"

namespace nrtsim::transport::algorithms {

void broadcast(Lockstep& g, void* data, size_t bytes, int root) {
  g.begin(Verb::kBroadcast, DType::kOpaque1, bytes, root, 0);
  char* p = static_cast<char*>(data);
  const int me = g.rank();
  if (g.use_mapped(bytes, bytes)) {
    const void* mine[1] = {data};
    g.publish(mine, 1, bytes);
    g.sync();
    if (g.all_mapped(1, root)) {
      if (me != root) copy_large(p, g.peer(root, 0), bytes);
      g.sync();  // nobody reads the root's buffer any more
      g.next_step();
      return;
    }
    g.next_step();  // the root's buffer is out of reach: the slots, from the other half
  }
  size_t off = 0;
  do {
    const size_t c = std::min(g.half_bytes(), bytes - off);
    if (me == root) std::memcpy(g.my_half(), p + off, c);
    g.sync();
    if (me != root) std::memcpy(p + off, g.half_of(root), c);
    g.next_step();
    off += c;
  } while (off < bytes);
}

}  // namespace nrtsim::transport::algorithms
