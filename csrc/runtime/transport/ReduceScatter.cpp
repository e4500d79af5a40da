// Reduce-scatter. Slots: every rank copies each rank's piece of a step into its slot, then
// reduces its own piece from all slots. Mapped: every rank reduces its part straight from every
// rank's input, in rank order, into its output (which may be its own input's part).
#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/transport/Algorithms.h"

namespace nrtsim::transport::algorithms {

namespace {

bool reduce_scatter_mapped(Lockstep& g, const void* const* ins, char* out, size_t count,
                           DType dtype, ReduceOp op) {
  const int n = g.size(), me = g.rank();
  g.publish(ins, n, count * dtype_size(dtype));
  g.sync();
  if (!g.all_mapped(n)) return false;
  std::vector<const void*> srcs(n);
  for (int k = 0; k < n; ++k) srcs[k] = g.peer(k, me);
  transport::reduce(out, srcs.data(), n, count, dtype, op);
  g.sync();  // nobody reads this rank's inputs any more
  g.next_step();
  return true;
}

}  // namespace

void reduce_scatter(Lockstep& g, const void* const* ins, void* out, size_t count, DType dtype,
                    ReduceOp op) {
  if (!reduce_supported(dtype, op)) transport::reduce(nullptr, nullptr, 0, 0, dtype, op);  // throws
  g.begin(Verb::kReduceScatter, dtype, count, -1, static_cast<uint64_t>(op));
  const int n = g.size(), me = g.rank();
  const size_t esz = dtype_size(dtype);
  if (g.use_mapped(count * esz * n)) {
    if (reduce_scatter_mapped(g, ins, static_cast<char*>(out), count, dtype, op)) return;
    g.next_step();  // some buffer is out of reach: the slots, from the other half
  }
  const size_t stride = g.half_bytes() / n / 64 * 64;
  const size_t chunk = stride / esz;
  char* dst = static_cast<char*>(out);
  std::vector<const void*> srcs(n);
  size_t off = 0;
  do {
    const size_t c = std::min(chunk, count - off);
    for (int r = 0; r < n; ++r) {
      std::memcpy(g.my_half() + r * stride, static_cast<const char*>(ins[r]) + off * esz, c * esz);
    }
    g.sync();
    for (int k = 0; k < n; ++k) srcs[k] = g.half_of(k) + me * stride;
    transport::reduce(dst + off * esz, srcs.data(), n, c, dtype, op);
    g.next_step();
    off += c;
  } while (off < count);
}

}  // namespace nrtsim::transport::algorithms
