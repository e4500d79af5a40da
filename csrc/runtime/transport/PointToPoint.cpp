#include "runtime/transport/PointToPoint.h"

#include <algorithm>
#include <cstring>

namespace nrtsim::transport {

namespace {

constexpr size_t kMessageHeader = 16;  // tag, payload bytes

void copy_into_ring(char* data, size_t capacity, uint64_t position, const char* src, size_t n) {
  const size_t at = position % capacity;
  const size_t first = std::min(n, capacity - at);
  std::memcpy(data + at, src, first);
  if (first < n) std::memcpy(data, src + first, n - first);
}
void copy_from_ring(const char* data, size_t capacity, uint64_t position, char* dst, size_t n) {
  const size_t at = position % capacity;
  const size_t first = std::min(n, capacity - at);
  std::memcpy(dst, data + at, first);
  if (first < n) std::memcpy(dst + first, data, n - first);
}

}  // namespace

void PointToPoint::ring_doorbell(int rank) {
  group_.control(rank).doorbell.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(group_.control(rank).doorbell);
}

std::shared_ptr<P2pRequest> PointToPoint::post_send(int peer, uint64_t tag, const void* data,
                                                    size_t bytes) {
  if (peer < 0 || peer >= group_.size() || peer == group_.rank()) {
    Health::fail("send: peer rank " + std::to_string(peer) +
                 " is not another rank of this group of " + std::to_string(group_.size()));
  }
  auto r = std::make_shared<P2pRequest>();
  r->send_ = true;
  r->peer_ = peer;
  r->tag_ = tag;
  r->buffer_ = const_cast<char*>(static_cast<const char*>(data));
  r->bytes_ = bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  sends_[peer].push_back(r);
  progress_locked();
  return r;
}

std::shared_ptr<P2pRequest> PointToPoint::post_recv(int peer, uint64_t tag, void* data,
                                                    size_t bytes) {
  if (peer < 0 || peer >= group_.size() || peer == group_.rank()) {
    Health::fail("recv: peer rank " + std::to_string(peer) +
                 " is not another rank of this group of " + std::to_string(group_.size()));
  }
  auto r = std::make_shared<P2pRequest>();
  r->peer_ = peer;
  r->tag_ = tag;
  r->buffer_ = static_cast<char*>(data);
  r->bytes_ = bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  r->posted_ = ++recvs_posted_;
  recvs_[peer].push_back(r);
  progress_locked();
  return r;
}

std::shared_ptr<P2pRequest> PointToPoint::post_recv_any(uint64_t tag, void* data, size_t bytes) {
  if (group_.size() < 2) {
    Health::fail("recv from any rank: this group of 1 rank has no other rank to send");
  }
  auto r = std::make_shared<P2pRequest>();
  r->any_source_ = true;
  r->peer_ = -1;
  r->tag_ = tag;
  r->buffer_ = static_cast<char*>(data);
  r->bytes_ = bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  r->posted_ = ++recvs_posted_;
  any_source_recvs_.push_back(r);
  progress_locked();
  return r;
}

PointToPoint::AnySourceMatch PointToPoint::match_any_source_locked(int peer) {
  auto& queue = recvs_[peer];
  // Only between messages: one already being received belongs to its receive.
  if (!queue.empty() && queue.front()->header_done_ > 0) return kNotClaimed;
  Ring& ring = group_.ring(peer, group_.rank());
  const uint64_t head = ring.head.load(std::memory_order_acquire);
  const uint64_t tail = ring.tail.load(std::memory_order_relaxed);
  if (head - tail < kMessageHeader) {
    // No whole header yet: the tag is unknown, so the peer's own receive may not start on this
    // message while an any-source receive posted before it might be the one to take it.
    return !queue.empty() && std::any_of(any_source_recvs_.begin(), any_source_recvs_.end(),
                                         [&](const auto& r) {
                                           return r->posted_ < queue.front()->posted_;
                                         })
               ? kWait
               : kNotClaimed;
  }
  uint64_t header[2];
  copy_from_ring(group_.ring_bytes(peer, group_.rank()), group_.channel_bytes(), tail,
                 reinterpret_cast<char*>(header), kMessageHeader);  // a peek: tail stays
  const auto taker = std::find_if(any_source_recvs_.begin(), any_source_recvs_.end(),
                                  [&](const auto& r) { return r->tag_ == header[0]; });
  if (taker == any_source_recvs_.end()) return kNotClaimed;
  // The peer's own next receive, if posted earlier, takes the message (and checks it) as before.
  if (!queue.empty() && queue.front()->posted_ < (*taker)->posted_) return kNotClaimed;
  (*taker)->peer_ = peer;
  queue.push_front(*taker);
  any_source_recvs_.erase(taker);
  return kClaimed;
}

bool PointToPoint::progress_one(P2pRequest& r) {
  const size_t capacity = group_.channel_bytes();
  const int me = group_.rank();
  bool moved = false;
  if (r.send_) {
    Ring& ring = group_.ring(me, r.peer_);
    char* data = group_.ring_bytes(me, r.peer_);
    uint64_t head = ring.head.load(std::memory_order_relaxed);
    const uint64_t tail = ring.tail.load(std::memory_order_acquire);
    size_t room = capacity - static_cast<size_t>(head - tail);
    if (r.header_done_ < kMessageHeader && room > 0) {
      uint64_t header[2] = {r.tag_, r.bytes_};
      const size_t n = std::min(room, kMessageHeader - r.header_done_);
      copy_into_ring(data, capacity, head, reinterpret_cast<char*>(header) + r.header_done_, n);
      r.header_done_ += n;
      head += n;
      room -= n;
      moved = true;
    }
    if (r.header_done_ == kMessageHeader && room > 0 && r.payload_done_ < r.bytes_) {
      const size_t n = std::min(room, r.bytes_ - r.payload_done_);
      copy_into_ring(data, capacity, head, r.buffer_ + r.payload_done_, n);
      r.payload_done_ += n;
      head += n;
      moved = true;
    }
    if (moved) {
      ring.head.store(head, std::memory_order_release);
      ring_doorbell(r.peer_);
    }
    if (r.header_done_ == kMessageHeader && r.payload_done_ == r.bytes_) {
      r.done_.store(true, std::memory_order_release);
    }
    return moved;
  }
  Ring& ring = group_.ring(r.peer_, me);
  const char* data = group_.ring_bytes(r.peer_, me);
  const uint64_t head = ring.head.load(std::memory_order_acquire);
  uint64_t tail = ring.tail.load(std::memory_order_relaxed);
  size_t available = static_cast<size_t>(head - tail);
  // The header is read only when whole, so that a wrong size is caught before any payload lands.
  if (r.header_done_ < kMessageHeader && available >= kMessageHeader) {
    uint64_t header[2];
    copy_from_ring(data, capacity, tail, reinterpret_cast<char*>(header), kMessageHeader);
    tail += kMessageHeader;
    available -= kMessageHeader;
    r.header_done_ = kMessageHeader;
    moved = true;
    if (header[0] != r.tag_ || header[1] != r.bytes_) {
      r.error_ = "recv on rank " + std::to_string(me) + " from rank " + std::to_string(r.peer_) +
                 (r.any_source_ ? " (a receive from any rank, given this message by its tag)"
                                : "") +
                 " expected " + std::to_string(r.bytes_) + " bytes with tag " +
                 std::to_string(r.tag_) + ", but the next message rank " +
                 std::to_string(r.peer_) + " sent has " + std::to_string(header[1]) +
                 " bytes with tag " + std::to_string(header[0]) +
                 " (sends and receives between two ranks must match in order, size, dtype and "
                 "tag)";
      ring.tail.store(tail, std::memory_order_release);
      r.done_.store(true, std::memory_order_release);
      health_.abort(r.error_);
      return true;
    }
  }
  if (r.header_done_ == kMessageHeader && available > 0 && r.payload_done_ < r.bytes_) {
    const size_t n = std::min(available, r.bytes_ - r.payload_done_);
    copy_from_ring(data, capacity, tail, r.buffer_ + r.payload_done_, n);
    r.payload_done_ += n;
    tail += n;
    moved = true;
  }
  if (moved) {
    ring.tail.store(tail, std::memory_order_release);
    ring_doorbell(r.peer_);
  }
  if (r.header_done_ == kMessageHeader && r.payload_done_ == r.bytes_) {
    r.done_.store(true, std::memory_order_release);
  }
  return moved;
}

bool PointToPoint::progress_locked() {
  bool moved = false;
  for (auto& queue : sends_) {
    while (!queue.empty()) {
      moved = progress_one(*queue.front()) || moved;
      if (!queue.front()->done()) break;
      queue.pop_front();
    }
  }
  // Receives, peer by peer; before each of a peer's messages an any-source receive may claim it.
  const int size = group_.size();
  for (int k = 0; k < size; ++k) {
    const int peer = (any_source_cursor_ + k) % size;
    auto& queue = recvs_[peer];
    for (;;) {
      if (!any_source_recvs_.empty() && match_any_source_locked(peer) == kWait) break;
      if (queue.empty()) break;
      moved = progress_one(*queue.front()) || moved;
      if (!queue.front()->done()) break;
      queue.pop_front();
    }
  }
  if (!any_source_recvs_.empty()) any_source_cursor_ = (any_source_cursor_ + 1) % size;
  return moved;
}

bool PointToPoint::test(P2pRequest& request) {
  if (!request.done()) {
    std::lock_guard<std::mutex> lock(mutex_);
    progress_locked();
  }
  if (request.done() && !request.error_.empty()) Health::fail(request.error_);
  return request.done();
}

void PointToPoint::wait_any_source_health(const P2pRequest& request,
                                          std::chrono::steady_clock::time_point start,
                                          const std::function<bool()>& ready) {
  // Any rank may still send, so only when every other rank has exited can none come any more.
  // A rank may have sent and exited since the caller last looked: once all have exited, what
  // they sent is final, so the request is offered the rings once more before it fails.
  bool all_ended = true;
  for (int r = 0; r < group_.size() && all_ended; ++r) {
    if (r != group_.rank() && !health_.ended(r)) all_ended = false;
  }
  const std::string which = "recv from any rank on rank " + std::to_string(group_.rank()) +
                            " (tag " + std::to_string(request.tag_) + ", " +
                            std::to_string(request.bytes_) + " bytes)";
  if (all_ended) {
    if (ready()) return;
    health_.abort_and_fail(which + " failed: every other rank of the group exited without "
                                   "sending a message with that tag");
  }
  if (std::chrono::steady_clock::now() - start > health_.timeout()) {
    health_.abort_and_fail(which + " timed out after " +
                           std::to_string(health_.timeout().count()) +
                           " ms (no rank sent a message with that tag; if one is only slow, give "
                           "the group a longer timeout)");
  }
}

void PointToPoint::wait(P2pRequest& request) {
  const char* what = request.send_ ? "send" : "recv";
  const int me = group_.rank();
  int peer = request.peer_;  // -1 while an any-source receive is unmatched
  auto ready = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    progress_locked();
    peer = request.peer_;
    return request.done();
  };
  for (int i = 0; i < 64 && !ready(); ++i) __builtin_ia32_pause();
  const auto start = std::chrono::steady_clock::now();
  std::atomic<uint32_t>& word = group_.mine().doorbell;
  while (!request.done()) {
    const uint32_t seen = word.load(std::memory_order_acquire);
    if (ready()) break;
    health_.raise_if_aborted(what);
    if (peer < 0) {
      wait_any_source_health(request, start, ready);
      if (!request.done()) futex_wait(word, seen, 2'000'000);
      continue;
    }
    // Only the peer matters to a point-to-point wait. It may have finished its part and exited
    // since `ready` ran: once it has exited, that part is final, so look once more.
    if (health_.ended(peer)) {
      if (ready()) break;
      health_.abort_and_fail(std::string(what) + " on rank " + std::to_string(me) +
                             " failed: rank " + std::to_string(peer) + " (pid " +
                             std::to_string(health_.pid_of(peer)) +
                             ") exited before the message completed (its own output says why)");
    }
    if (std::chrono::steady_clock::now() - start > health_.timeout()) {
      health_.abort_and_fail(std::string(what) + " on rank " + std::to_string(me) +
                             " with rank " + std::to_string(peer) + " timed out after " +
                             std::to_string(health_.timeout().count()) +
                             " ms (the peer is hung or never posted the matching " +
                             (request.send_ ? "recv" : "send") +
                             "; if it is only slow, give the group a longer timeout)");
    }
    futex_wait(word, seen, 2'000'000);
  }
  if (!request.error_.empty()) Health::fail(request.error_);
}

}  // namespace nrtsim::transport
