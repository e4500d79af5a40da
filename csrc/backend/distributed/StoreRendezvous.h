// The rendezvous of a group's creation through the c10d Store: waiting for the values the other
// ranks publish, with the group's timeout (not the store's own, which a TCPStore sets far
// longer), naming the ranks that never came, saying so when the store itself is gone (its host
// exited), and, for a large group, printing who has joined while it waits.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuronx::distributed {

// Waits until every key exists (keys[i] is published by group rank from_ranks[i]). With
// `progress`, prints every 10 s how many ranks have joined and which are missing.
void rendezvous_wait(c10d::Store& store, const std::vector<std::string>& keys,
                     const std::vector<int>& from_ranks, int rank,
                     std::chrono::milliseconds timeout, bool progress);
// The value of one key, once published.
std::vector<uint8_t> rendezvous_get(c10d::Store& store, const std::string& key, int rank,
                                    int from_rank, std::chrono::milliseconds timeout);

}  // namespace torch_neuronx::distributed
