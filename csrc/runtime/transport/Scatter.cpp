// Scatter. Slots: the root copies every rank's piece of a step into its slot, each rank copies
// its own out. Mapped: each rank copies its part straight from the root's buffer (only the
// root's buffers must be mapped).
#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/transport/Algorithms.h"
#include "runtime/transport/StreamingCopy.h"

namespace nrtsim::transport::algorithms {

void scatter(Lockstep& g, const void* const* ins, void* out, size_t bytes, int root) {
  g.begin(Verb::kScatter, DType::kOpaque1, bytes, root, 0);
  const int n = g.size(), me = g.rank();
  char* dst = static_cast<char*>(out);
  if (g.use_mapped(bytes * n, bytes)) {
    // Only the root has inputs; the others publish nothing that anyone reads.
    std::vector<const void*> none(n, nullptr);
    g.publish(me == root ? ins : none.data(), n, me == root ? bytes : 0);
    g.sync();
    if (g.all_mapped(n, root)) {
      const char* src = g.peer(root, me);
      if (src != dst) copy_large(dst, src, bytes);
      g.sync();  // nobody reads the root's inputs any more
      g.next_step();
      return;
    }
    g.next_step();  // the root's inputs are out of reach: the slots, from the other half
  }
  const size_t stride = g.half_bytes() / n / 64 * 64;
  size_t off = 0;
  do {
    const size_t c = std::min(stride, bytes - off);
    if (me == root) {
      for (int r = 0; r < n; ++r) {
        std::memcpy(g.my_half() + r * stride, static_cast<const char*>(ins[r]) + off, c);
      }
    }
    g.sync();
    std::memcpy(dst + off, g.half_of(root) + me * stride, c);
    g.next_step();
    off += c;
  } while (off < bytes);
}

}  // namespace nrtsim::transport::algorithms
