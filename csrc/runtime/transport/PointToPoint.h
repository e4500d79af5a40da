// Point to point between the ranks of one host's group: one ring per ordered pair of ranks in the
// group's segment, messages of a 16-byte header (tag, size) and the payload, in the order they
// were sent. Sends and receives are posted and make progress whenever this rank posts, tests or
// waits, so exchanges in either order, batched or not, do not deadlock whatever their size.
//
// A receive names the size and tag of the message it takes; a receive from any rank (c10d's
// recvAnysource) takes the first message with its tag at the head of some rank's queue. Per
// pair, order still holds: the message at the head of rank p's queue goes to the earliest posted
// receive that can take it, p's own next receive or an any-source receive of that tag; messages
// with other tags are left to their own receives; senders are checked in rotating order so that
// none starves the others.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/transport/GroupSegment.h"
#include "runtime/transport/Health.h"

namespace nrtsim::transport {

// One outstanding send or receive. Completed by PointToPoint::wait / test.
class P2pRequest {
 public:
  bool done() const { return done_.load(std::memory_order_acquire); }
  const std::string& error() const { return error_; }
  size_t bytes() const { return bytes_; }
  // The other rank; for a receive from any rank, the sender once done() (-1 until matched).
  int peer() const { return peer_; }

 private:
  friend class PointToPoint;
  bool send_ = false;
  bool any_source_ = false;
  int peer_ = 0;
  uint64_t tag_ = 0;
  uint64_t posted_ = 0;  // the order of this rank's receives, for matching any-source ones
  char* buffer_ = nullptr;
  size_t bytes_ = 0;
  size_t header_done_ = 0;  // bytes of the 16-byte message header moved so far
  size_t payload_done_ = 0;
  std::atomic<bool> done_{false};
  std::string error_;
};

class PointToPoint {
 public:
  PointToPoint(GroupSegment& group, Health& health)
      : group_(group), health_(health), sends_(group.size()), recvs_(group.size()) {}

  std::shared_ptr<P2pRequest> post_send(int peer, uint64_t tag, const void* data, size_t bytes);
  std::shared_ptr<P2pRequest> post_recv(int peer, uint64_t tag, void* data, size_t bytes);
  std::shared_ptr<P2pRequest> post_recv_any(uint64_t tag, void* data, size_t bytes);
  // Completes `request` (making progress on every other one meanwhile); a dead or hung peer, an
  // abort or a mismatched message fails it with an Error.
  void wait(P2pRequest& request);
  bool test(P2pRequest& request);

 private:
  bool progress_locked();
  bool progress_one(P2pRequest& r);
  // Whether an any-source receive took `peer`'s next message (kClaimed), did not (kNotClaimed:
  // the peer's own receives go on), or cannot tell yet (kWait: the message's header is not
  // whole, and an any-source receive posted before the peer's next receive might be the one to
  // take it, so that receive must not start).
  enum AnySourceMatch { kClaimed, kNotClaimed, kWait };
  AnySourceMatch match_any_source_locked(int peer);
  // An unmatched any-source receive fails once every other rank has exited, or at the timeout.
  void wait_any_source_health(const P2pRequest& request,
                              std::chrono::steady_clock::time_point start,
                              const std::function<bool()>& ready);
  void ring_doorbell(int rank);

  GroupSegment& group_;
  Health& health_;
  std::mutex mutex_;
  std::vector<std::deque<std::shared_ptr<P2pRequest>>> sends_;  // per peer, in order
  std::vector<std::deque<std::shared_ptr<P2pRequest>>> recvs_;
  std::deque<std::shared_ptr<P2pRequest>> any_source_recvs_;  // unmatched, in posting order
  uint64_t recvs_posted_ = 0;
  int any_source_cursor_ = 0;  // the peer checked first, rotating so no sender starves the others
};

}  // namespace nrtsim::transport
