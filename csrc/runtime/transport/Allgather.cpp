// All-gather and gather. Slots: every rank copies a step of its part into its slot, and every
// rank (or the root) copies all parts out. Mapped: every rank (or the root) copies each peer's
// part straight from the peer's buffer, all parts together (StreamingCopy.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/SharedHbm.h"
#include "runtime/transport/Algorithms.h"
#include "runtime/transport/StreamingCopy.h"

namespace nrtsim::transport::algorithms {

namespace {

bool gather_mapped(Lockstep& g, const char* in, void* const* outs, size_t bytes, int root) {
  const int n = g.size(), me = g.rank();
  const void* mine[1] = {in};
  g.publish(mine, 1, bytes);
  g.sync();
  // All-gather: every rank reads every other; gather: the root reads the others.
  if (!g.all_mapped(1, -1, root)) return false;
  if (root < 0 || root == me) {
    std::vector<CopyPart> parts;
    for (int k = 0; k < n; ++k) {
      const char* src = k == me ? in : g.peer(k, 0);
      if (outs[k] != src) parts.push_back({outs[k], src, bytes});
    }
    copy_parts(parts.data(), static_cast<int>(parts.size()));
  }
  g.sync();  // nobody reads this rank's input any more
  g.next_step();
  return true;
}

}  // namespace

void gather(Lockstep& g, const void* in, void* const* outs, size_t bytes, int root) {
  g.begin(root < 0 ? Verb::kAllgather : Verb::kGather, DType::kOpaque1, bytes, root, 0);
  const char* src = static_cast<const char*>(in);
  const int n = g.size(), me = g.rank();
  // All-gather: every rank writes the whole output either way, and mapped memory takes away
  // each rank's copy into its slot and the cross-core reads of those copies, which outweighs
  // its second barrier once each rank's part is an allocation of the device memory file
  // (SharedHbm::kMinBytes; a smaller input is usually private, and finding that out would
  // cost the barrier for nothing): 4 ranks on 2 cores, Intel Xeon, 256 KiB in all 243 against
  // 292 us, 1 MiB 0.78 against 1.00 ms; at 64 KiB the slots win (97 against 111 us).
  // Gather: only the root copies, and the others' second barrier is what mapping costs them
  // (Lockstep::use_mapped).
  if (root < 0 ? g.use_mapped(bytes * n) && bytes >= SharedHbm::kMinBytes
               : g.use_mapped(bytes * n, bytes)) {
    if (gather_mapped(g, src, outs, bytes, root)) return;
    g.next_step();  // some buffer is out of reach: the slots, from the other half
  }
  size_t off = 0;
  do {
    const size_t c = std::min(g.half_bytes(), bytes - off);
    std::memcpy(g.my_half(), src + off, c);
    g.sync();
    if (root < 0 || root == me) {
      for (int r = 0; r < n; ++r) {
        std::memcpy(static_cast<char*>(outs[r]) + off, r == me ? src + off : g.half_of(r), c);
      }
    }
    g.next_step();
    off += c;
  } while (off < bytes);
}

}  // namespace nrtsim::transport::algorithms
