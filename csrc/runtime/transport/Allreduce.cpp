// All-reduce and reduce.
//
// Slots: each rank copies a chunk into its slot; small chunks (up to kDirectReduceBytes) every
// rank (or the root) reduces whole from all slots after one barrier; larger ones each rank reduces
// its 1/N share into its own slot, and after a second barrier every rank (or the root) gathers
// the shares.
//
// Mapped: all-reduce is a reduce-scatter in place followed by an all-gather, both straight
// between the buffers: rank r reduces chunk r of every rank's buffer, in rank order, into chunk r
// of its own; after a barrier it copies every other chunk from the rank that owns it. Each rank
// reads its peers and writes only itself, and nobody writes a chunk while another reads it (rank
// r writes chunk r in the first phase, which others read only in the second, and the other chunks
// in the second, which others read only in the first). Reduce keeps the non-roots' data as it
// was: each rank reduces its share of a slot-sized step from the buffers into its slot, and the
// root collects the shares.
#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/transport/Algorithms.h"
#include "runtime/transport/StreamingCopy.h"

namespace nrtsim::transport::algorithms {

namespace {

// Up to this size a chunk is reduced whole by every rank (one barrier); above it the ranks split
// the work (two barriers, 1/N of the reads each).
constexpr size_t kDirectReduceBytes = 64 << 10;

size_t share_lo(size_t count, int rank, int size) { return count * rank / size; }

bool reduce_mapped(Lockstep& g, char* data, size_t count, DType dtype, ReduceOp op, int root) {
  const size_t esz = dtype_size(dtype);
  const int n = g.size(), me = g.rank();
  const void* mine[1] = {data};
  g.publish(mine, 1, count * esz);
  g.sync();
  if (!g.all_mapped(1)) return false;
  std::vector<const char*> buffer(n);
  for (int k = 0; k < n; ++k) buffer[k] = g.peer(k, 0);
  std::vector<const void*> srcs(n);
  if (root < 0) {
    const size_t lo = share_lo(count, me, n), hi = share_lo(count, me + 1, n);
    for (int k = 0; k < n; ++k) srcs[k] = buffer[k] + lo * esz;
    transport::reduce(data + lo * esz, srcs.data(), n, hi - lo, dtype, op);
    g.sync();  // every chunk is reduced in its owner's buffer
    std::vector<CopyPart> parts;
    for (int k = 0; k < n; ++k) {
      const size_t klo = share_lo(count, k, n), khi = share_lo(count, k + 1, n);
      if (k != me && khi > klo) {
        parts.push_back({data + klo * esz, buffer[k] + klo * esz, (khi - klo) * esz});
      }
    }
    copy_parts(parts.data(), static_cast<int>(parts.size()));
    g.sync();  // nobody reads this rank's buffer any more
    g.next_step();
    return true;
  }
  // The table stays in this half until every rank has passed the next barrier, which it reaches
  // only after reading it (above).
  g.next_step();
  const size_t step = g.half_bytes() / esz * n;
  size_t off = 0;
  do {
    const size_t c = std::min(step, count - off);
    const size_t lo = share_lo(c, me, n), hi = share_lo(c, me + 1, n);
    for (int k = 0; k < n; ++k) srcs[k] = buffer[k] + (off + lo) * esz;
    transport::reduce(g.my_half(), srcs.data(), n, hi - lo, dtype, op);
    g.sync();  // every share of this step is in its slot; nobody reads this step's data any more
    if (me == root) {
      for (int r = 0; r < n; ++r) {
        const size_t rlo = share_lo(c, r, n), rhi = share_lo(c, r + 1, n);
        std::memcpy(data + (off + rlo) * esz, g.half_of(r), (rhi - rlo) * esz);
      }
    }
    g.next_step();
    off += c;
  } while (off < count);
  return true;
}

}  // namespace

void reduce(Lockstep& g, void* data, size_t count, DType dtype, ReduceOp op, int root) {
  if (!reduce_supported(dtype, op)) transport::reduce(nullptr, nullptr, 0, 0, dtype, op);  // throws
  g.begin(root < 0 ? Verb::kAllreduce : Verb::kReduce, dtype, count, root,
          static_cast<uint64_t>(op));
  const size_t esz = dtype_size(dtype);
  char* p = static_cast<char*>(data);
  if (g.use_mapped(count * esz)) {
    if (reduce_mapped(g, p, count, dtype, op, root)) return;
    g.next_step();  // some buffer is out of reach: the slots, from the other half
  }
  const int n = g.size(), me = g.rank();
  const size_t chunk = g.half_bytes() / esz;
  std::vector<const void*> srcs(n);
  size_t off = 0;
  do {
    const size_t c = std::min(chunk, count - off);
    std::memcpy(g.my_half(), p + off * esz, c * esz);
    g.sync();
    if (c * esz <= kDirectReduceBytes) {
      // Small: every rank (or the root) reduces the whole chunk from all slots itself, in rank
      // order, so the results are the same bits everywhere, after one barrier instead of two.
      if (root < 0 || root == me) {
        for (int k = 0; k < n; ++k) srcs[k] = g.half_of(k);
        transport::reduce(p + off * esz, srcs.data(), n, c, dtype, op);
      }
      g.next_step();
      off += c;
      continue;
    }
    // Each rank reduces its own share of the chunk, in rank order, into its own slot.
    const size_t lo = share_lo(c, me, n), hi = share_lo(c, me + 1, n);
    for (int k = 0; k < n; ++k) srcs[k] = g.half_of(k) + lo * esz;
    transport::reduce(g.my_half() + lo * esz, srcs.data(), n, hi - lo, dtype, op);
    g.sync();
    if (root < 0 || root == me) {
      for (int r = 0; r < n; ++r) {
        const size_t rlo = share_lo(c, r, n), rhi = share_lo(c, r + 1, n);
        std::memcpy(p + (off + rlo) * esz, g.half_of(r) + rlo * esz, (rhi - rlo) * esz);
      }
    }
    g.next_step();
    off += c;
  } while (off < count);
}

}  // namespace nrtsim::transport::algorithms
