// All-to-all with per-pair sizes. Every rank first publishes what it sends to and expects from
// each rank, and where its send buffers are; all ranks read the same tables, so a disagreement
// fails on every rank alike. Mapped (every buffer that crosses between two ranks in mapped
// memory): every rank copies what each peer sends it straight from the peer's buffer, all parts
// together. Slots: rounds of one region per destination in each rank's slot.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/transport/Algorithms.h"
#include "runtime/transport/StreamingCopy.h"

namespace nrtsim::transport::algorithms {

void alltoall(Lockstep& g, const void* const* ins, const size_t* send_bytes, void* const* outs,
              const size_t* recv_bytes) {
  g.begin(Verb::kAlltoall, DType::kOpaque1, 0, -1, 0);
  const int n = g.size(), me = g.rank();
  auto* table = reinterpret_cast<uint64_t*>(g.my_half());
  for (int r = 0; r < n; ++r) {
    table[r] = send_bytes[r];
    table[n + r] = recv_bytes[r];
  }
  // Behind the sizes, where each send buffer is, for its receiver to read it in place.
  const size_t places = 2 * n * sizeof(uint64_t);
  std::vector<size_t> shared(send_bytes, send_bytes + n);
  shared[me] = 0;  // this rank copies its own part itself
  g.publish(ins, n, 0, places, shared.data());
  g.sync();
  uint64_t largest = 0;
  std::string mismatch;
  for (int s = 0; s < n; ++s) {
    const auto* sent = reinterpret_cast<const uint64_t*>(g.half_of(s));
    for (int d = 0; d < n; ++d) {
      const uint64_t expected = reinterpret_cast<const uint64_t*>(g.half_of(d))[n + s];
      largest = std::max<uint64_t>(largest, sent[d]);
      if (sent[d] != expected && mismatch.size() < 400) {
        mismatch += " rank " + std::to_string(s) + " sends " + std::to_string(sent[d]) +
                    " bytes to rank " + std::to_string(d) + ", which expects " +
                    std::to_string(expected) + ";";
      }
    }
  }
  if (!mismatch.empty()) {
    Health::fail("alltoall: the split sizes of the ranks disagree:" + mismatch +
                 " each rank's output split for a peer must equal that peer's input split for it");
  }
  bool mapped = g.use_mapped(largest * n);
  for (int s = 0; s < n && mapped; ++s) {
    const auto* sent = reinterpret_cast<const uint64_t*>(g.half_of(s));
    const auto* entries = reinterpret_cast<const uint64_t*>(g.half_of(s) + places);
    for (int d = 0; d < n && mapped; ++d) {
      mapped = d == s || sent[d] == 0 || entries[d * Lockstep::kEntryWords + 2] != 0;
    }
  }
  if (mapped) {
    g.count_mapped_op();
    std::vector<CopyPart> parts;
    for (int s = 0; s < n; ++s) {
      if (recv_bytes[s] == 0) continue;
      if (s == me) {
        std::memmove(outs[s], ins[s], recv_bytes[s]);
        continue;
      }
      parts.push_back({outs[s], g.peer(s, me, places), recv_bytes[s]});
    }
    copy_parts(parts.data(), static_cast<int>(parts.size()));
    g.sync();  // nobody reads this rank's send buffers any more
    g.next_step();
    return;
  }
  g.next_step();
  const size_t region = g.half_bytes() / n / 64 * 64;
  const uint64_t rounds = (largest + region - 1) / region;
  for (uint64_t t = 0; t < rounds; ++t) {
    const size_t lo = t * region;
    for (int d = 0; d < n; ++d) {
      if (lo < send_bytes[d]) {
        std::memcpy(g.my_half() + d * region, static_cast<const char*>(ins[d]) + lo,
                    std::min(region, send_bytes[d] - lo));
      }
    }
    g.sync();
    for (int s = 0; s < n; ++s) {
      if (lo < recv_bytes[s]) {
        std::memcpy(static_cast<char*>(outs[s]) + lo, g.half_of(s) + me * region,
                    std::min(region, recv_bytes[s] - lo));
      }
    }
    g.next_step();
  }
}

}  // namespace nrtsim::transport::algorithms
