#include "runtime/transport/Lockstep.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/SharedHbm.h"

namespace nrtsim::transport {

namespace {

std::string describe(const Descriptor& d) {
  const Verb verb = static_cast<Verb>(d.verb);
  const VerbInfo& info = verb_info(verb);
  std::string s = info.name;
  if (verb == Verb::kBarrier || verb == Verb::kAlltoall) return s;
  if (!info.reduces) {
    s += " of " + std::to_string(d.count) + " bytes";
  } else {
    s += " of " + std::to_string(d.count) + " " + dtype_name(static_cast<DType>(d.dtype)) +
         " elements with " + reduce_op_name(static_cast<ReduceOp>(d.aux));
  }
  if (info.rooted) s += " (root " + std::to_string(d.root) + ")";
  return s;
}

}  // namespace

void Lockstep::begin(Verb verb, DType dtype, uint64_t count, int64_t root, uint64_t aux) {
  health_.raise_if_aborted(verb_name(verb));
  ++op_seq_;
  current_ = verb;
  group_.mine().desc[op_seq_ % 2] = Descriptor{op_seq_, static_cast<uint32_t>(verb),
                                               static_cast<uint32_t>(dtype), count, root, aux};
  check_pending_ = true;
}

void Lockstep::sync() {
  const uint64_t target = ++epoch_;
  GroupHeader& h = group_.header();
  const int n = size();
  const auto all_arrived = [&] {
    for (int r = 0; r < n; ++r) {
      if (group_.control(r).arrived.load(std::memory_order_seq_cst) < target) return false;
    }
    return true;
  };
  // Only the last to arrive rings: earlier arrivals would wake the sleepers for nothing, and with
  // more ranks than cores each needless wake-up takes a core from a rank still on its way. (The
  // store and the look at the others are sequentially consistent, so of two ranks arriving last
  // together at least one sees everyone; a sleeper that read the doorbell before it changed does
  // not sleep: its futex wait finds another value.)
  group_.mine().arrived.store(target, std::memory_order_seq_cst);
  if (all_arrived()) {
    h.doorbell.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(h.doorbell);
  }
  health_.wait_for(
      all_arrived,
      [&] {
        std::vector<int> late;
        for (int r = 0; r < n; ++r) {
          if (group_.control(r).arrived.load(std::memory_order_acquire) < target) late.push_back(r);
        }
        return late;
      },
      what(), h.doorbell);
  if (check_pending_) {
    check_pending_ = false;
    check_descriptors();
  }
}

void Lockstep::check_descriptors() {
  const Descriptor& mine = group_.mine().desc[op_seq_ % 2];
  bool same = true;
  for (int r = 0; r < size(); ++r) {
    const Descriptor& d = group_.control(r).desc[op_seq_ % 2];
    same = same && d.seq == mine.seq && d.verb == mine.verb && d.dtype == mine.dtype &&
           d.count == mine.count && d.root == mine.root && d.aux == mine.aux;
  }
  if (same) return;
  std::string message = std::string(verb_name(static_cast<Verb>(mine.verb))) +
                        ": the ranks of the group called different collectives (call #" +
                        std::to_string(mine.seq) + " of this group):";
  for (int r = 0; r < size(); ++r) {
    const Descriptor& d = group_.control(r).desc[op_seq_ % 2];
    message += " rank " + std::to_string(r) + ": " + describe(d) +
               (d.seq != mine.seq ? " (its call #" + std::to_string(d.seq) + ")" : "") + ";";
  }
  message += " every rank must call the same collectives in the same order, with the same sizes, "
             "dtype, reduce op and root";
  Health::fail(message);
}

// An entry: the buffer's address here, and where it is in the rank's device memory file (the
// allocation's file offset and length, and the buffer's offset inside it; length 0: not there).
void Lockstep::publish(const void* const* addresses, int n, size_t bytes, size_t at,
                       const size_t* sizes) {
  auto* table = reinterpret_cast<uint64_t*>(my_half() + at);
  for (int i = 0; i < n; ++i) {
    uint64_t* e = table + i * kEntryWords;
    e[0] = reinterpret_cast<uint64_t>(addresses[i]);
    e[1] = e[2] = e[3] = 0;
    const size_t size = sizes ? sizes[i] : bytes;
    if (!negotiated_.mapped || size == 0) continue;
    if (const auto where = SharedHbm::instance().locate(addresses[i], size)) {
      e[1] = where->alloc_offset;
      e[2] = where->alloc_bytes;
      e[3] = where->offset_in_alloc;
    }
  }
}

bool Lockstep::all_mapped(int n, int only, int skip, size_t at) {
  bool all = negotiated_.mapped;
  for (int r = 0; r < size() && all; ++r) {
    if ((only >= 0 && r != only) || r == skip) continue;
    const auto* table = reinterpret_cast<const uint64_t*>(half_of(r) + at);
    for (int i = 0; i < n; ++i) all = all && table[i * kEntryWords + 2] != 0;
  }
  if (all) ++mapped_ops_;
  return all;
}

const char* Lockstep::peer(int peer, int index, size_t at) {
  const uint64_t* e =
      reinterpret_cast<const uint64_t*>(half_of(peer) + at) + index * kEntryWords;
  if (peer == rank()) return reinterpret_cast<const char*>(e[0]);
  return map_entry(peer, e);
}

const char* Lockstep::map_entry(int peer, const uint64_t* entry) {
  const char* base = negotiated_.peers ? negotiated_.peers->map(peer, entry[1], entry[2], op_seq_)
                                       : nullptr;
  if (base == nullptr) {
    health_.abort_and_fail("rank " + std::to_string(rank()) + " could not map " +
                           std::to_string(entry[2]) + " bytes of rank " + std::to_string(peer) +
                           "'s device memory during " + what() + " (" + std::strerror(errno) +
                           "; NRTSIM_COLLECTIVE_SINGLE_COPY=0 keeps the group to the "
                           "shared-memory slots)");
  }
  return base + entry[3];
}

}  // namespace nrtsim::transport
