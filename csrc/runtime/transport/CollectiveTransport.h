// The simulated NeuronLink of one host: the collectives of one process group whose ranks are
// processes on this host, carried through one shared-memory segment. Torch-free: it moves and
// reduces raw buffers (device memory is host memory in nrtsim), the backend layer turns tensors
// into buffers and does the rendezvous (the segment's name travels through the c10d Store).
//
// Segment layout: a header, one control block per rank (barrier counter, pid, the descriptor of
// the rank's current collective, a doorbell), one slot per rank for collective data, and one
// ring per ordered pair of ranks for point-to-point messages.
//
// Collectives run in lockstep steps: each rank writes into its own slot, all ranks meet at a
// barrier, each reads what it needs from the others' slots. Slots are split in two halves used
// by alternate steps, so a step's writes can only overwrite a half every rank has finished
// reading two steps earlier, and one barrier per step suffices (two for reductions).
//
// Single copy: for messages of at least `single_copy_min_bytes`, ranks skip the slots and move
// data straight between each other's buffers with Linux cross-memory attach
// (process_vm_readv / process_vm_writev: one copy between two address spaces, no shared mapping;
// device memory is ordinary host memory of each rank's process). Each collective then publishes
// its buffers' addresses in the slot, meets once, moves the data, and meets once more so that no
// rank returns (and lets its caller reuse the buffer) while a peer still reads or writes it.
// Whether the kernel allows it (Yama ptrace_scope, seccomp in containers, different users) is
// probed when the group starts; if any rank cannot reach any other, the whole group keeps the slot
// path. Nothing of this is visible in the results: reductions combine in rank order either way,
// so both paths give the same bits.
//
// Faults: every wait has the group's timeout, watches the other ranks' processes, and watches an
// abort flag any rank may raise. A dead, hung or aborted peer becomes an Error naming the rank,
// never a hang. Ranks that call different collectives, or the same one with different sizes or
// element types, all get an Error naming the difference (each collective publishes a descriptor
// that every rank checks at its first barrier).
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

#include "runtime/transport/Reduce.h"
#include "runtime/transport/ShmSegment.h"

namespace nrtsim::transport {

struct TransportOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  size_t slot_bytes = 8u << 20;     // per rank; half of it is one step's payload
  size_t channel_bytes = 1u << 20;  // per ordered pair of ranks, for send/recv
  // Cross-memory attach for large messages when the kernel allows it (see above). kAuto uses it
  // unless the group has more ranks than this process may run on CPUs: then CPU time, not memory
  // traffic, is the limit, and the kernel's work per page (pinning, ~0.4 us per 4 KiB page
  // measured here) costs as much as the copy it saves. The environment overrides both fields:
  // NRTSIM_COLLECTIVE_SINGLE_COPY=0|1|auto, NRTSIM_COLLECTIVE_SINGLE_COPY_BYTES=<bytes>. A rank
  // that has it off turns it off for the group; the group takes the largest threshold.
  enum class SingleCopy : uint8_t { kOff, kAuto, kOn };
  SingleCopy single_copy = SingleCopy::kAuto;
  size_t single_copy_min_bytes = 16u << 20;
};

// What a rank is about to do: checked against every other rank's at the first barrier.
enum class OpKind : uint32_t {
  kBarrier = 1,
  kBroadcast,
  kAllreduce,
  kReduce,
  kAllgather,
  kGather,
  kScatter,
  kReduceScatter,
  kAlltoall,
};
const char* op_kind_name(OpKind kind);

// One outstanding send or receive. Completed by CollectiveTransport::wait / test.
class P2pRequest {
 public:
  bool done() const { return done_.load(std::memory_order_acquire); }
  const std::string& error() const { return error_; }
  size_t bytes() const { return bytes_; }

 private:
  friend class CollectiveTransport;
  bool send_ = false;
  int peer_ = 0;
  uint64_t tag_ = 0;
  char* buffer_ = nullptr;
  size_t bytes_ = 0;
  size_t header_done_ = 0;  // bytes of the 16-byte message header moved so far
  size_t payload_done_ = 0;
  std::atomic<bool> done_{false};
  std::string error_;
};

class CollectiveTransport {
 public:
  // Rank 0 creates the segment `name` and then calls `created` (where it publishes the name);
  // the others join it once rank 0 has published the name. Both return when every rank has
  // mapped the segment.
  static std::unique_ptr<CollectiveTransport> create(
      const std::string& name, int size, const TransportOptions& options,
      const std::function<void()>& created = {});
  static std::unique_ptr<CollectiveTransport> join(const std::string& name, int rank, int size,
                                                   const TransportOptions& options);
  ~CollectiveTransport();
  CollectiveTransport(const CollectiveTransport&) = delete;
  CollectiveTransport& operator=(const CollectiveTransport&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const TransportOptions& options() const { return options_; }
  void set_timeout(std::chrono::milliseconds timeout) { options_.timeout = timeout; }
  // Whether the group moves large messages by cross-memory attach, and if not, why not.
  bool single_copy() const { return single_copy_; }
  const std::string& single_copy_status() const { return single_copy_status_; }

  void barrier();
  void broadcast(void* data, size_t bytes, int root);
  void allreduce(void* data, size_t count, DType dtype, ReduceOp op);
  // Only `root`'s data receives the result; the others' stays as it was.
  void reduce(void* data, size_t count, DType dtype, ReduceOp op, int root);
  // outs[r] receives rank r's `bytes` bytes.
  void allgather(const void* in, void* const* outs, size_t bytes);
  void gather(const void* in, void* const* outs, size_t bytes, int root);  // outs: root only
  void scatter(const void* const* ins, void* out, size_t bytes, int root);  // ins: root only
  // out = op over ranks of ins[rank()] of every rank; ins[r] has `count` elements.
  void reduce_scatter(const void* const* ins, void* out, size_t count, DType dtype, ReduceOp op);
  // ins[r] (send_bytes[r]) goes to rank r, outs[r] (recv_bytes[r]) comes from rank r. Sizes
  // may differ per pair; every rank's recv_bytes[s] must equal rank s's send_bytes[me].
  void alltoall(const void* const* ins, const size_t* send_bytes, void* const* outs,
                const size_t* recv_bytes);

  // Point to point: messages between two ranks arrive in the order they were sent; a receive
  // must name the size and tag of the message it receives. Posting makes what progress it can
  // at once; wait() completes a request (and makes progress on every other one meanwhile).
  std::shared_ptr<P2pRequest> post_send(int peer, uint64_t tag, const void* data, size_t bytes);
  std::shared_ptr<P2pRequest> post_recv(int peer, uint64_t tag, void* data, size_t bytes);
  void wait(P2pRequest& request);
  bool test(P2pRequest& request);

  // Makes every rank's current and future waits fail with `reason` (this rank named as the
  // source). Idempotent.
  void abort(const std::string& reason);
  bool aborted() const;

 private:
  struct Layout;
  CollectiveTransport(ShmSegment segment, int rank, int size, const TransportOptions& options,
                      const std::function<void()>& mapped = {});
  void wait_until_all_mapped();
  void negotiate_single_copy();  // probes every peer, then the group agrees (one barrier)

  // The step machinery.
  void begin(OpKind kind, DType dtype, uint64_t count, int64_t root, uint64_t aux);
  void sync();  // a barrier; the first of each collective also checks the descriptors
  void check_descriptors();
  char* my_half() const { return half_of(rank_); }
  char* half_of(int r) const;
  size_t half_bytes() const { return options_.slot_bytes / 2; }
  void next_step() { ++step_; }

  // Waiting.
  template <class Ready, class Awaited>
  void wait_for(Ready&& ready, Awaited&& awaited, const char* what, std::atomic<uint32_t>& word);
  // Throws (and aborts the group) on an abort by any rank, a dead awaited rank, or the timeout.
  void check_health(const char* what, std::chrono::steady_clock::time_point start,
                    const std::vector<int>& awaited);
  [[noreturn]] void fail(const std::string& message);

  // Single copy. Whether this op takes that path (same answer on every rank whose descriptor
  // matches); publishing `n` addresses in this rank's slot half, and reading a peer's table.
  bool use_single_copy(size_t bytes) const {
    return single_copy_ && size_ > 1 && bytes >= options_.single_copy_min_bytes;
  }
  void publish(const void* const* addresses, int n);
  uint64_t published(int peer, int index) const;
  // Moves `bytes` between local memory and `remote` in `peer`'s address space; a dead peer, an
  // abort or an unreadable buffer becomes an Error naming the rank (the group is aborted).
  void peer_read(int peer, uint64_t remote, void* local, size_t bytes);
  void peer_write(int peer, uint64_t remote, const void* local, size_t bytes);
  void peer_copy(bool write, int peer, uint64_t remote, char* local, size_t bytes);
  // dst[0, count) = op over ranks k of (rank k's buffer at remote[k])[0, count), in rank order;
  // `own` is this rank's part (local). After each cache-sized block is reduced, it is written
  // to push_to[k] in every peer k whose push_to[k] is non-zero.
  void reduce_from_peers(char* dst, const char* own, const uint64_t* remote, size_t count,
                         DType dtype, ReduceOp op, const uint64_t* push_to);
  void reduce_single_copy(char* data, size_t count, DType dtype, ReduceOp op, int root);
  void gather_single_copy(const char* in, void* const* outs, size_t bytes, int root);
  void reduce_scatter_single_copy(const void* const* ins, char* out, size_t count, DType dtype,
                                  ReduceOp op);

  // Point to point.
  bool progress_locked();
  bool progress_one(P2pRequest& r);

  ShmSegment segment_;
  Layout* layout_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  TransportOptions options_;
  uint64_t epoch_ = 0;   // barriers this rank has passed
  uint64_t step_ = 0;    // slot half in use: step_ % 2
  uint64_t op_seq_ = 0;  // collectives begun
  bool check_pending_ = false;
  OpKind current_op_ = OpKind::kBarrier;
  std::chrono::steady_clock::time_point last_health_check_{};
  bool single_copy_ = false;
  std::string single_copy_status_ = "not negotiated";
  uint64_t probe_token_ = 0;     // peers read (and write back) this word to test access
  std::vector<char> scratch_;    // peers' blocks on their way into a reduction

  std::mutex p2p_mutex_;
  std::vector<std::deque<std::shared_ptr<P2pRequest>>> sends_;  // per peer, in order
  std::vector<std::deque<std::shared_ptr<P2pRequest>>> recvs_;
};

}  // namespace nrtsim::transport
