#include "backend/distributed/StoreRendezvous.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>

#include "backend/distributed/Staging.h"

namespace torch_neuronx::distributed {

// A rank that never creates this group, or creates it under other keys, must become an error
// naming it, never a hang. A large job's ranks take a while to start (32 interpreters importing
// torch on a few cores): the progress lines say that the job is waiting, and for whom.
void rendezvous_wait(c10d::Store& store, const std::vector<std::string>& keys,
                     const std::vector<int>& from_ranks, int rank,
                     std::chrono::milliseconds timeout, bool progress) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto missing = [&] {
    std::vector<int> late;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!store.check({keys[i]})) late.push_back(from_ranks[i]);
    }
    return late;
  };
  const auto ranks_text = [](const std::vector<int>& ranks) {
    std::string s;
    for (size_t i = 0; i < ranks.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    if (ranks.size() > 16) s += ", ...";
    return s;
  };
  while (true) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
    const auto slice = std::min(timeout - waited, std::chrono::milliseconds(progress ? 10'000 : timeout.count()));
    try {
      store.wait(keys, std::max(slice, std::chrono::milliseconds(1)));
      return;
    } catch (const c10::DistStoreError&) {
      // A wait that timed out: the store is fine, some rank is late.
    } catch (const std::exception& e) {
      dist_error("neuron process group: rank " + std::to_string(rank) +
                 " lost the c10d Store while the group was being created (" + e.what() +
                 "): the rank that hosts it (rank 0 of the job, at MASTER_ADDR) has exited or is "
                 "unreachable; every member must create the group before that rank exits");
    }
    const std::vector<int> late = missing();
    if (late.empty()) return;
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
    if (now >= timeout) {
      dist_error("neuron process group: rank " + std::to_string(rank) + " waited " +
                 std::to_string(timeout.count()) + " ms for " +
                 (late.size() == 1 ? "rank " : "ranks ") + ranks_text(late) +
                 " of the new group to join it: every rank of a group must create it (the same "
                 "new_group / split_group calls, in the same order, on every member)");
    }
    if (progress) {
      std::fprintf(stderr,
                   "neuron process group: %zu of %zu ranks have joined after %lld s, waiting for "
                   "rank(s) %s\n",
                   keys.size() + 1 - late.size(), keys.size() + 1,
                   static_cast<long long>(now.count() / 1000), ranks_text(late).c_str());
    }
  }
}

std::vector<uint8_t> rendezvous_get(c10d::Store& store, const std::string& key, int rank,
                                    int from_rank, std::chrono::milliseconds timeout) {
  rendezvous_wait(store, {key}, {from_rank}, rank, timeout, false);
  return store.get(key);
}

}  // namespace torch_neuronx::distributed
