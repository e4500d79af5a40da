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
// Single copy: for large messages ranks skip the slots and move data straight between each
// other's buffers. Each collective then publishes where its buffers are in the slot, meets once,
// moves the data, and meets once more so that no rank returns (and lets its caller reuse the
// buffer) while a peer still reads or writes it. Two ways to reach a peer's buffer:
//  - mapped device memory (from `mapped_min_bytes`): large device allocations live in each
//    process's SharedHbm file, which every peer maps (PeerHbm), so a rank loads and stores a
//    peer's buffer like its own: the one copy runs at memcpy speed, with no work per page.
//  - cross-memory attach (from `single_copy_min_bytes`), for buffers outside that file (private
//    memory, CPU staging): process_vm_readv / process_vm_writev, one copy between two address
//    spaces, but the kernel pins every page on the way.
// If some rank's buffer of an operation is in neither reach, every rank sees that in the published
// table and the group moves that operation through the slots. Whether the host allows each way
// (/proc access, Yama ptrace_scope, seccomp in containers, different users) is probed when the
// group starts; a way some rank cannot use is off for the whole group. Nothing of this is visible
// in the results: reductions combine in rank order on every path, so all give the same bits.
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

#include "runtime/transport/PeerHbm.h"
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
  // Mapped device memory costs no CPU time beyond the copy, so it pays from much smaller messages
  // (below this the slots, which stay in cache, win: measured in docs/benchmarks.md). It is on
  // unless single_copy is kOff (NRTSIM_COLLECTIVE_SINGLE_COPY=0) or NRTSIM_SHARED_HBM=0;
  // NRTSIM_COLLECTIVE_MAPPED_BYTES=<bytes> overrides the threshold.
  size_t mapped_min_bytes = 1u << 20;
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
  // The other rank; for a receive from any rank, the sender once done() (-1 until matched).
  int peer() const { return peer_; }

 private:
  friend class CollectiveTransport;
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
  // Whether the ranks have mapped each other's device memory, and if not, why not.
  bool mapped_hbm() const { return mapped_; }
  const std::string& mapped_hbm_status() const { return mapped_status_; }
  // Collectives so far that moved every buffer through mapped device memory.
  uint64_t mapped_ops() const { return mapped_ops_; }

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
  // A receive from any other rank (c10d's recvAnysource): the first message with `tag` at the
  // head of some rank's queue. Per pair, order still holds: the message at the head of rank p's
  // queue goes to the earliest posted receive that can take it, p's own next receive or an
  // any-source receive of that tag; messages with other tags are left to their own receives.
  // request.peer() names the sender once done.
  std::shared_ptr<P2pRequest> post_recv_any(uint64_t tag, void* data, size_t bytes);
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
  // `awaited` lists the ranks still awaited; it is called again before a rank that has exited is
  // blamed, since that rank may have arrived, moved on and exited after the first call.
  void check_health(const char* what, std::chrono::steady_clock::time_point start,
                    const std::function<std::vector<int>()>& awaited);
  [[noreturn]] void fail(const std::string& message);

  // Single copy. Whether this op tries that path (the same answer on every rank whose
  // descriptor matches); publishing where `n` buffers of `bytes` each are, in this rank's slot
  // half; after the barrier, whether every rank can reach every published buffer (all ranks read
  // the same tables, so all agree; false: the op goes through the slots); and a peer's buffer.
  // `slot_part`, for operations that only copy (broadcast, gather): what one rank's slot carries
  // of the message on the slot path. There mapped memory saves only that one copy but costs a
  // second barrier (with more ranks than cores, about as much as copying a MiB or two), so it is
  // taken once one rank's part is a quarter of a step (1 MiB with the default slots). Measured
  // for all_gather at 4 ranks on 2 cores, mapped against slots: 1 MiB per rank, 1.79-2.24 ms
  // against 2.16-2.99 (Intel Xeon) and 1.81-1.84 against 1.68-1.71 (AMD EPYC, where Gloo took
  // 6-8 ms); 4 MiB per rank, 5.6-6.0 ms against 8.1-8.3 (Intel Xeon).
  bool use_single_copy(size_t bytes, size_t slot_part = 0) const {
    const bool mapped = mapped_ && bytes >= options_.mapped_min_bytes &&
                        (slot_part == 0 || slot_part >= half_bytes() / 4);
    return size_ > 1 && (mapped || (single_copy_ && bytes >= options_.single_copy_min_bytes));
  }
  void publish(const void* const* addresses, int n, size_t bytes);
  bool all_reachable(int n, size_t bytes);
  struct Remote {
    uint64_t address = 0;    // in the peer's address space (0: none)
    char* mapped = nullptr;  // the same bytes mapped here, or nullptr (cross-memory attach)
    Remote at(size_t offset) const {
      return {address + offset, mapped ? mapped + offset : nullptr};
    }
  };
  Remote remote(int peer, int index);
  // The buffer a published entry of `peer` names, mapped here; a refused mapping fails the group.
  char* map_entry(int peer, const uint64_t* entry);
  // Moves `bytes` between local memory and `remote` in `peer`'s memory; a dead peer, an abort or
  // an unreadable buffer becomes an Error naming the rank (the group is aborted).
  void peer_read(int peer, const Remote& remote, void* local, size_t bytes);
  void peer_write(int peer, const Remote& remote, const void* local, size_t bytes);
  void peer_copy(bool write, int peer, const Remote& remote, char* local, size_t bytes);
  // dst[0, count) = op over ranks k of remote[k][0, count), in rank order; `own` is this rank's
  // part (local). After each cache-sized block is reduced, it is written to push_to[k] in every
  // peer k that has one.
  void reduce_from_peers(char* dst, const char* own, const Remote* remote, size_t count,
                         DType dtype, ReduceOp op, const Remote* push_to);
  // These return false, after their first barrier, when some rank's buffer is out of reach
  // (every rank returns false alike); the caller then moves the operation through the slots.
  bool reduce_single_copy(char* data, size_t count, DType dtype, ReduceOp op, int root);
  bool gather_single_copy(const char* in, void* const* outs, size_t bytes, int root);
  bool reduce_scatter_single_copy(const void* const* ins, char* out, size_t count, DType dtype,
                                  ReduceOp op);
  // Mapped device memory: open every peer's SharedHbm file (before negotiate_single_copy's
  // barrier), then take the group's answer (after it).
  void open_peer_hbm();
  void agree_mapped_hbm();

  // Point to point.
  bool progress_locked();
  bool progress_one(P2pRequest& r);
  // Gives the message at the head of `peer`'s ring to an any-source receive when one may take it.
  // Whether an any-source receive took the peer's next message (kClaimed), did not
  // (kNotClaimed: the peer's own receives go on), or cannot tell yet (kWait: the message's
  // header is not whole, and an any-source receive posted before the peer's next receive might
  // be the one to take it, so that receive must not start).
  enum AnySourceMatch { kClaimed, kNotClaimed, kWait };
  AnySourceMatch match_any_source_locked(int peer);
  // An unmatched any-source receive fails once every other rank has exited, or at the timeout.
  // `ready` makes progress and says whether the request is done.
  void wait_any_source_health(const P2pRequest& request,
                              std::chrono::steady_clock::time_point start,
                              const std::function<bool()>& ready);

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
  bool mapped_ = false;
  uint64_t mapped_ops_ = 0;
  std::string mapped_status_ = "not negotiated";
  std::unique_ptr<PeerHbm> peer_hbm_;
  uint64_t probe_token_ = 0;     // peers read (and write back) this word to test access
  std::vector<char> scratch_;    // peers' blocks on their way into a reduction

  std::mutex p2p_mutex_;
  std::vector<std::deque<std::shared_ptr<P2pRequest>>> sends_;  // per peer, in order
  std::vector<std::deque<std::shared_ptr<P2pRequest>>> recvs_;
  std::deque<std::shared_ptr<P2pRequest>> any_source_recvs_;  // unmatched, in posting order
  uint64_t recvs_posted_ = 0;
  int any_source_cursor_ = 0;  // the peer checked first, rotating so no sender starves the others
};

}  // namespace nrtsim::transport
