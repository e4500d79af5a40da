#include "runtime/transport/CollectiveTransport.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "runtime/Env.h"
#include "runtime/Error.h"
#include "runtime/SharedHbm.h"
#include "runtime/transport/StreamingCopy.h"

namespace nrtsim::transport {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kBarrier: return "barrier";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kReduce: return "reduce";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kGather: return "gather";
    case OpKind::kScatter: return "scatter";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAlltoall: return "alltoall";
  }
  return "?";
}

namespace {

constexpr uint64_t kMagic = 0x6e727473696d6c6bULL;  // "nrtsimlk"
constexpr size_t kPage = 4096;
constexpr size_t kMessageHeader = 16;  // tag, payload bytes
// Up to this size a reduction is done whole by every rank (one barrier); above it the ranks
// split the work (two barriers, 1/N of the reads each).
constexpr size_t kDirectReduceBytes = 64 << 10;
// Single-copy reductions move peers' data through scratch blocks that stay in this core's cache
// between the copy and the reduction: the blocks of all ranks together take about this much.
constexpr size_t kReduceCacheBudget = 1u << 20;

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

struct alignas(64) Header {
  std::atomic<uint64_t> magic;
  uint32_t size;
  uint32_t reserved;
  uint64_t slot_bytes;
  uint64_t channel_bytes;
  alignas(64) std::atomic<uint32_t> doorbell;  // bumped at every barrier arrival (a futex word)
  alignas(64) std::atomic<uint32_t> mapped;    // ranks that have mapped the segment (a futex word)
  std::atomic<uint32_t> aborted;               // 0 no, 1 being written, 2 reason readable
  int32_t abort_rank;
  char abort_reason[448];
};

struct Descriptor {
  uint64_t seq;
  uint32_t kind;
  uint32_t dtype;
  uint64_t count;
  int64_t root;
  uint64_t aux;
};

struct alignas(128) RankControl {
  std::atomic<uint64_t> arrived;   // barriers passed
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> doorbell;  // bumped when a peer wrote to, or read from, a ring of ours
  Descriptor desc[2];              // by collective sequence parity
  // Single-copy negotiation: a word of this rank's memory that peers read to test access, what
  // this rank found (0 not yet, 1 every peer reachable, 2 not wanted, 3 a peer unreachable, with
  // the peer and errno, 4 more ranks than its CPUs) and the smallest message it would move that
  // way.
  uint64_t probe_address;
  uint64_t probe_value;
  std::atomic<uint32_t> single_copy;
  int32_t single_copy_peer;
  int32_t single_copy_errno;
  uint64_t single_copy_min_bytes;
  int32_t cpus;
  // Mapped device memory: this rank's SharedHbm file (fd -1: none), what this rank found when it
  // opened every peer's (0 not yet, 1 all, 2 not wanted, 3 a peer's failed: which and why), and
  // its threshold.
  int32_t hbm_fd;
  uint64_t hbm_device;
  uint64_t hbm_inode;
  std::atomic<uint32_t> mapped;
  int32_t mapped_peer;
  uint64_t mapped_min_bytes;
  char mapped_why[192];
};

struct alignas(128) Ring {
  std::atomic<uint64_t> head;  // bytes ever written (by the sender)
  char pad[56];
  std::atomic<uint64_t> tail;  // bytes ever read (by the receiver)
};

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, long ns) {
  timespec ts{0, ns};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
            0);
}

// Whether process `pid` has ended (gone, or a zombie its parent has not reaped yet).
bool process_ended(int pid) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

std::string describe(const Descriptor& d) {
  const OpKind kind = static_cast<OpKind>(d.kind);
  std::string s = op_kind_name(kind);
  switch (kind) {
    case OpKind::kBarrier:
    case OpKind::kAlltoall: break;
    case OpKind::kBroadcast:
    case OpKind::kAllgather:
    case OpKind::kGather:
    case OpKind::kScatter:
      s += " of " + std::to_string(d.count) + " bytes";
      break;
    default:
      s += " of " + std::to_string(d.count) + " " + dtype_name(static_cast<DType>(d.dtype)) +
           " elements";
      if (kind == OpKind::kAllreduce || kind == OpKind::kReduce ||
          kind == OpKind::kReduceScatter) {
        s += std::string(" with ") + reduce_op_name(static_cast<ReduceOp>(d.aux));
      }
  }
  if (kind == OpKind::kBroadcast || kind == OpKind::kReduce || kind == OpKind::kGather ||
      kind == OpKind::kScatter) {
    s += " (root " + std::to_string(d.root) + ")";
  }
  return s;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

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

struct CollectiveTransport::Layout {
  Header* header;
  RankControl* controls;
  char* slots;
  Ring* rings;
  char* ring_data;
  size_t slot_bytes;
  size_t channel_bytes;
  int size;

  static size_t controls_offset() { return kPage; }
  static size_t slots_offset(int size) {
    return align_up(controls_offset() + sizeof(RankControl) * size, kPage);
  }
  static size_t rings_offset(int size, size_t slot) { return slots_offset(size) + slot * size; }
  static size_t ring_data_offset(int size, size_t slot) {
    return align_up(rings_offset(size, slot) + sizeof(Ring) * size * size, kPage);
  }
  static size_t total(int size, size_t slot, size_t channel) {
    return ring_data_offset(size, slot) + channel * size * size;
  }

  Layout(char* base, int n, size_t slot, size_t channel)
      : header(reinterpret_cast<Header*>(base)),
        controls(reinterpret_cast<RankControl*>(base + controls_offset())),
        slots(base + slots_offset(n)),
        rings(reinterpret_cast<Ring*>(base + rings_offset(n, slot))),
        ring_data(base + ring_data_offset(n, slot)),
        slot_bytes(slot),
        channel_bytes(channel),
        size(n) {}

  Ring& ring(int from, int to) const { return rings[from * size + to]; }
  char* ring_bytes(int from, int to) const {
    return ring_data + (static_cast<size_t>(from) * size + to) * channel_bytes;
  }
};

static_assert(sizeof(Header) <= kPage);

std::unique_ptr<CollectiveTransport> CollectiveTransport::create(
    const std::string& name, int size, const TransportOptions& options,
    const std::function<void()>& created) {
  if (size < 1) throw Error(ErrorCode::kInvalidArgument, "collective group of size < 1");
  TransportOptions o = options;
  // A step must hold the alltoall size table (two entries per rank) and a cache line per rank.
  o.slot_bytes = align_up(std::max<size_t>(o.slot_bytes, std::max<size_t>(64 << 10, 256u * size)),
                          kPage);
  o.channel_bytes = align_up(std::max<size_t>(o.channel_bytes, 4096), 64);
  ShmSegment segment =
      ShmSegment::create(name, Layout::total(size, o.slot_bytes, o.channel_bytes));
  auto* header = reinterpret_cast<Header*>(segment.data());
  header->size = static_cast<uint32_t>(size);
  header->slot_bytes = o.slot_bytes;
  header->channel_bytes = o.channel_bytes;
  header->magic.store(kMagic, std::memory_order_release);
  try {
    return std::unique_ptr<CollectiveTransport>(
        new CollectiveTransport(std::move(segment), 0, size, o, created));
  } catch (...) {
    ShmSegment::unlink(name);
    throw;
  }
}

std::unique_ptr<CollectiveTransport> CollectiveTransport::join(const std::string& name, int rank,
                                                               int size,
                                                               const TransportOptions& options) {
  ShmSegment segment = ShmSegment::open(name);
  auto* header = reinterpret_cast<Header*>(segment.data());
  if (segment.size() < kPage || header->magic.load(std::memory_order_acquire) != kMagic ||
      header->size != static_cast<uint32_t>(size) || rank <= 0 || rank >= size) {
    throw Error(ErrorCode::kInvalidArgument,
                "collective transport: segment " + name + " is not the group of " +
                    std::to_string(size) + " ranks that rank " + std::to_string(rank) +
                    " expected (was it created by another job?)");
  }
  TransportOptions o = options;
  o.slot_bytes = header->slot_bytes;
  o.channel_bytes = header->channel_bytes;
  return std::unique_ptr<CollectiveTransport>(
      new CollectiveTransport(std::move(segment), rank, size, o));
}

CollectiveTransport::CollectiveTransport(ShmSegment segment, int rank, int size,
                                         const TransportOptions& options,
                                         const std::function<void()>& mapped)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      options_(options),
      sends_(size),
      recvs_(size) {
  layout_ = new Layout(segment_.data(), size, options_.slot_bytes, options_.channel_bytes);
  RankControl& me = layout_->controls[rank_];
  using SingleCopy = TransportOptions::SingleCopy;
  if (const auto v = env::get("NRTSIM_COLLECTIVE_SINGLE_COPY")) {
    const std::optional<bool> on = env::parse_auto_switch("NRTSIM_COLLECTIVE_SINGLE_COPY", *v);
    options_.single_copy = !on ? SingleCopy::kAuto : *on ? SingleCopy::kOn : SingleCopy::kOff;
  }
  if (const auto v = env::bytes_value("NRTSIM_COLLECTIVE_SINGLE_COPY_BYTES")) {
    options_.single_copy_min_bytes = *v;
  }
  if (const auto v = env::bytes_value("NRTSIM_COLLECTIVE_MAPPED_BYTES")) {
    options_.mapped_min_bytes = *v;
  }
  me.hbm_fd = -1;
  if (options_.single_copy != SingleCopy::kOff && size_ > 1) {
    const SharedHbm::FileId file = SharedHbm::instance().file();
    me.hbm_fd = file.fd;
    me.hbm_device = file.device;
    me.hbm_inode = file.inode;
  }
  me.mapped_min_bytes = options_.mapped_min_bytes;
  if (options_.single_copy != SingleCopy::kOff && size_ > 1) {
    // Under Yama's ptrace_scope=1 only a process's ancestors may read its memory, and ranks are
    // siblings; this lets any process of the same user do so (nothing else changes: the kernel
    // still demands the same user). Fails harmlessly where there is no Yama.
    ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    probe_token_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32) | 1;
    me.probe_address = reinterpret_cast<uint64_t>(&probe_token_);
    me.probe_value = probe_token_;
  }
  me.single_copy_min_bytes = options_.single_copy_min_bytes;
  me.pid.store(static_cast<int32_t>(::getpid()), std::memory_order_release);
  try {
    if (mapped) mapped();
    wait_until_all_mapped();
    negotiate_single_copy();
  } catch (...) {
    delete layout_;
    throw;
  }
}

CollectiveTransport::~CollectiveTransport() {
  // Normally unlinked long ago; after a failed start this is the last chance.
  ShmSegment::unlink(segment_.name());
  delete layout_;
}

void CollectiveTransport::wait_until_all_mapped() {
  Header& h = *layout_->header;
  h.mapped.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(h.mapped);
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const uint32_t seen = h.mapped.load(std::memory_order_acquire);
    if (seen >= static_cast<uint32_t>(size_)) break;
    if (std::chrono::steady_clock::now() - start > options_.timeout) {
      ShmSegment::unlink(segment_.name());
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r) {
        if (layout_->controls[r].pid.load() == 0) missing.push_back(r);
      }
      throw Error(ErrorCode::kConfiguration,
                  "collective transport: rank(s) " + rank_list(missing) +
                      " did not join the group's shared memory within the timeout of " +
                      std::to_string(options_.timeout.count()) +
                      " ms (did every rank of the group start and create it?)");
    }
    futex_wait(h.mapped, seen, 5'000'000);
  }
  // Everyone has it mapped: the name is no longer needed, and without it nothing can outlive
  // the job, whatever way its processes end.
  ShmSegment::unlink(segment_.name());
}

void CollectiveTransport::negotiate_single_copy() {
  RankControl* controls = layout_->controls;
  RankControl& me = controls[rank_];
  using SingleCopy = TransportOptions::SingleCopy;
  uint32_t verdict = options_.single_copy == SingleCopy::kOff ? 2 : 1;
  for (int k = 0; k < size_ && verdict == 1; ++k) {
    if (k == rank_ || controls[k].probe_address == 0) continue;  // 0: the peer does not want it
    // Read the peer's token, and write it back unchanged: both directions need the same
    // permission, but a seccomp filter could allow one and not the other.
    uint64_t got = 0;
    const pid_t pid = controls[k].pid.load(std::memory_order_acquire);
    iovec local{&got, sizeof(got)};
    iovec remote{reinterpret_cast<void*>(controls[k].probe_address), sizeof(got)};
    ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    int err = n < 0 ? errno : 0;
    if (n == static_cast<ssize_t>(sizeof(got)) && got == controls[k].probe_value) {
      n = ::process_vm_writev(pid, &local, 1, &remote, 1, 0);
      err = n < 0 ? errno : 0;
    }
    if (n != static_cast<ssize_t>(sizeof(got)) || got != controls[k].probe_value) {
      verdict = 3;
      me.single_copy_peer = k;
      me.single_copy_errno = err;  // 0: the read worked but saw another word (another pid space)
    }
  }
  cpu_set_t cpus;
  me.cpus = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
  if (verdict == 1 && options_.single_copy == SingleCopy::kAuto && me.cpus > 0 &&
      size_ > me.cpus) {
    verdict = 4;
  }
  me.single_copy.store(verdict, std::memory_order_release);
  open_peer_hbm();
  sync();
  agree_mapped_hbm();
  // Every rank must take the same path for the same message, so the group agrees on one answer.
  single_copy_ = true;
  single_copy_status_ = "on";
  for (int r = 0; r < size_; ++r) {
    const RankControl& c = controls[r];
    options_.single_copy_min_bytes =
        std::max<size_t>(options_.single_copy_min_bytes, c.single_copy_min_bytes);
    const uint32_t v = c.single_copy.load(std::memory_order_acquire);
    if (v == 1 || !single_copy_) continue;
    single_copy_ = false;
    if (v == 2) {
      single_copy_status_ = "off: disabled on rank " + std::to_string(r) +
                            " (TransportOptions::single_copy or NRTSIM_COLLECTIVE_SINGLE_COPY=0)";
    } else if (v == 4) {
      single_copy_status_ =
          "off: the group's " + std::to_string(size_) + " ranks outnumber the " +
          std::to_string(c.cpus) + " CPUs of rank " + std::to_string(r) +
          ", where cross-memory attach costs as much CPU time as it saves; "
          "NRTSIM_COLLECTIVE_SINGLE_COPY=1 uses it anyway";
    } else {
      single_copy_status_ =
          "off: rank " + std::to_string(r) + " cannot reach the memory of rank " +
          std::to_string(c.single_copy_peer) + " with process_vm_readv/writev (" +
          (c.single_copy_errno ? std::strerror(c.single_copy_errno)
                               : "it read another word: are the ranks in different pid "
                                 "namespaces?") +
          "); collectives use the shared-memory slots";
    }
  }
  if (size_ == 1) {
    single_copy_ = false;
    single_copy_status_ = "off: a group of one rank moves nothing";
  }
}

void CollectiveTransport::open_peer_hbm() {
  RankControl* controls = layout_->controls;
  RankControl& me = controls[rank_];
  if (me.hbm_fd < 0) {
    std::snprintf(me.mapped_why, sizeof(me.mapped_why), "%s",
                  options_.single_copy == TransportOptions::SingleCopy::kOff
                      ? "single copy is off (NRTSIM_COLLECTIVE_SINGLE_COPY=0)"
                      : SharedHbm::instance().status().c_str());
    me.mapped.store(2, std::memory_order_release);
    return;
  }
  peer_hbm_ = std::make_unique<PeerHbm>(size_);
  for (int k = 0; k < size_; ++k) {
    if (k == rank_) continue;
    std::string why = "it has no device memory file";
    if (controls[k].hbm_fd >= 0) {
      why = peer_hbm_->open(k, controls[k].pid.load(std::memory_order_acquire),
                            controls[k].hbm_fd, controls[k].hbm_device, controls[k].hbm_inode);
    }
    if (!why.empty()) {
      me.mapped_peer = k;
      std::snprintf(me.mapped_why, sizeof(me.mapped_why), "%s", why.c_str());
      me.mapped.store(3, std::memory_order_release);
      return;
    }
  }
  me.mapped.store(1, std::memory_order_release);
}

void CollectiveTransport::agree_mapped_hbm() {
  const RankControl* controls = layout_->controls;
  for (int r = 0; r < size_; ++r) {  // every rank takes the same threshold
    options_.mapped_min_bytes =
        std::max<size_t>(options_.mapped_min_bytes, controls[r].mapped_min_bytes);
  }
  mapped_ = size_ > 1;
  mapped_status_ = size_ > 1 ? "on" : "off: a group of one rank moves nothing";
  // Name the cause: a rank that has it off explains why its peers could not map its memory.
  for (const uint32_t cause : {2u, 3u}) {
    for (int r = 0; r < size_ && mapped_; ++r) {
      const RankControl& c = controls[r];
      if (c.mapped.load(std::memory_order_acquire) != cause) continue;
      mapped_ = false;
      mapped_status_ = cause == 2 ? "off on rank " + std::to_string(r) + ": " + c.mapped_why
                                  : "off: rank " + std::to_string(r) +
                                        " cannot map the device memory of rank " +
                                        std::to_string(c.mapped_peer) + ": " + c.mapped_why;
    }
  }
  if (!mapped_) peer_hbm_.reset();
}

// A published buffer: its address, and where it is in the rank's device memory file (the
// allocation's file offset and length, and the buffer's offset inside it; length 0: not there).
constexpr int kEntryWords = 4;

void CollectiveTransport::publish(const void* const* addresses, int n, size_t bytes) {
  auto* table = reinterpret_cast<uint64_t*>(my_half());
  for (int i = 0; i < n; ++i) {
    uint64_t* e = table + i * kEntryWords;
    e[0] = reinterpret_cast<uint64_t>(addresses[i]);
    e[1] = e[2] = e[3] = 0;
    if (!mapped_) continue;
    if (const auto at = SharedHbm::instance().locate(addresses[i], bytes)) {
      e[1] = at->alloc_offset;
      e[2] = at->alloc_bytes;
      e[3] = at->offset_in_alloc;
    }
  }
}

bool CollectiveTransport::all_reachable(int n, size_t bytes) {
  bool all_mapped = mapped_;
  for (int r = 0; r < size_ && all_mapped; ++r) {
    const auto* table = reinterpret_cast<const uint64_t*>(half_of(r));
    for (int i = 0; i < n; ++i) all_mapped = all_mapped && table[i * kEntryWords + 2] != 0;
  }
  if (all_mapped) ++mapped_ops_;
  return all_mapped || (single_copy_ && bytes >= options_.single_copy_min_bytes);
}

CollectiveTransport::Remote CollectiveTransport::remote(int peer, int index) {
  const uint64_t* e = reinterpret_cast<const uint64_t*>(half_of(peer)) + index * kEntryWords;
  Remote r{e[0], nullptr};
  if (peer == rank_ || e[2] == 0 || !peer_hbm_) return r;
  r.mapped = map_entry(peer, e);
  return r;
}

char* CollectiveTransport::map_entry(int peer, const uint64_t* entry) {
  char* base = peer_hbm_->map(peer, entry[1], entry[2], op_seq_);
  if (base == nullptr) {
    const std::string reason = "rank " + std::to_string(rank_) + " could not map " +
                               std::to_string(entry[2]) + " bytes of rank " +
                               std::to_string(peer) + "'s device memory during " +
                               op_kind_name(current_op_) + " (" + std::strerror(errno) + ")";
    abort(reason);
    fail(reason);
  }
  return base + entry[3];
}

void CollectiveTransport::peer_read(int peer, const Remote& remote, void* local, size_t bytes) {
  peer_copy(false, peer, remote, static_cast<char*>(local), bytes);
}

void CollectiveTransport::peer_write(int peer, const Remote& remote, const void* local,
                                     size_t bytes) {
  peer_copy(true, peer, remote, const_cast<char*>(static_cast<const char*>(local)), bytes);
}

void CollectiveTransport::peer_copy(bool write, int peer, const Remote& remote_buffer,
                                    char* local, size_t bytes) {
  if (remote_buffer.mapped != nullptr) {
    // The mapping holds the peer's pages even if it dies meanwhile; the barrier that closes the
    // operation notices a dead peer.
    if (write) {
      copy_large(remote_buffer.mapped, local, bytes);
    } else {
      copy_large(local, remote_buffer.mapped, bytes);
    }
    return;
  }
  const uint64_t remote = remote_buffer.address;
  const pid_t pid = layout_->controls[peer].pid.load(std::memory_order_acquire);
  size_t done = 0;
  while (done < bytes) {
    // The kernel may move less than asked (it caps one call near 2 GiB): continue from there.
    iovec l{local + done, bytes - done};
    iovec r{reinterpret_cast<void*>(remote + done), bytes - done};
    const ssize_t n = write ? ::process_vm_writev(pid, &l, 1, &r, 1, 0)
                            : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = n < 0 ? errno : EFAULT;
    if (err == EINTR) continue;
    const char* what = op_kind_name(current_op_);
    // A peer that gave up (abort, timeout) may have released its buffer: report why it gave up.
    if (aborted()) check_health(what, std::chrono::steady_clock::now(), nullptr);
    std::string reason;
    if (err == ESRCH || process_ended(pid)) {
      reason = "rank " + std::to_string(peer) + " (pid " + std::to_string(pid) +
               ") exited while the group still needed it during " + what;
    } else {
      reason = "rank " + std::to_string(rank_) + " could not " + (write ? "write" : "read") +
               " " + std::to_string(bytes - done) + " bytes " + (write ? "to" : "from") +
               " rank " + std::to_string(peer) + "'s buffer during " + what + " (" +
               std::strerror(err) +
               "; was the buffer freed or resized while the collective ran?)";
    }
    abort(reason);
    fail(std::string(what) + " on rank " + std::to_string(rank_) + " failed: " + reason);
  }
}

void CollectiveTransport::reduce_from_peers(char* dst, const char* own, const Remote* remote,
                                            size_t count, DType dtype, ReduceOp op,
                                            const Remote* push_to) {
  const size_t esz = dtype_size(dtype);
  const size_t block_bytes =
      std::clamp<size_t>(kReduceCacheBudget / (size_ + 1) / kPage * kPage, 16 << 10, 256 << 10);
  const size_t block = std::max<size_t>(1, block_bytes / esz);
  scratch_.resize((size_ + 1) * block * esz);
  char* out_block = scratch_.data() + size_ * block * esz;
  std::vector<const void*> srcs(size_);
  for (size_t off = 0; off < count; off += block) {
    const size_t c = std::min(block, count - off);
    for (int k = 0; k < size_; ++k) {
      if (k == rank_) {
        srcs[k] = own + off * esz;
      } else if (remote[k].mapped != nullptr) {
        srcs[k] = remote[k].mapped + off * esz;  // straight from the peer's memory
      } else {
        char* s = scratch_.data() + k * block * esz;
        peer_read(k, remote[k].at(off * esz), s, c * esz);
        srcs[k] = s;
      }
    }
    char* out = dst ? dst + off * esz : out_block;
    transport::reduce(out, srcs.data(), size_, c, dtype, op);
    for (int k = 0; k < size_; ++k) {
      if (k != rank_ && push_to[k].address != 0) {
        peer_write(k, push_to[k].at(off * esz), out, c * esz);
      }
    }
  }
}

bool CollectiveTransport::reduce_single_copy(char* data, size_t count, DType dtype, ReduceOp op,
                                             int root) {
  const size_t esz = dtype_size(dtype);
  const void* mine[1] = {data};
  publish(mine, 1, count * esz);
  sync();
  if (!all_reachable(1, count * esz)) return false;
  // Rank r reduces chunk r of every rank's buffer, in rank order, and writes the result where it
  // belongs: for allreduce into its own buffer and every peer's (nobody else touches chunk r of
  // any buffer meanwhile, so this needs no barrier between reading and writing); for reduce into
  // the root's buffer only, leaving the others' data as it was.
  const size_t lo = count * rank_ / size_, hi = count * (rank_ + 1) / size_;
  std::vector<Remote> remotes(size_), push(size_);
  for (int k = 0; k < size_; ++k) {
    remotes[k] = remote(k, 0).at(lo * esz);
    if (root < 0 || k == root) push[k] = remotes[k];
  }
  const bool keep = root < 0 || root == rank_;
  reduce_from_peers(keep ? data + lo * esz : nullptr, data + lo * esz, remotes.data(), hi - lo,
                    dtype, op, push.data());
  sync();  // every chunk is everywhere; no peer touches this rank's buffer any more
  next_step();
  return true;
}

bool CollectiveTransport::gather_single_copy(const char* in, void* const* outs, size_t bytes,
                                             int root) {
  const void* mine[1] = {in};
  publish(mine, 1, bytes);
  sync();
  if (!all_reachable(1, bytes * size_)) return false;
  if (root < 0 || root == rank_) {
    // Every part mapped here: copied together (StreamingCopy.h). A part reached through
    // cross-memory attach goes on its own, through the kernel.
    std::vector<CopyPart> parts;
    for (int k = 0; k < size_; ++k) {
      if (k == rank_) {
        if (outs[k] != in) parts.push_back({outs[k], in, bytes});
      } else if (const Remote r = remote(k, 0); r.mapped != nullptr) {
        parts.push_back({outs[k], r.mapped, bytes});
      } else {
        peer_read(k, r, outs[k], bytes);
      }
    }
    copy_parts(parts.data(), static_cast<int>(parts.size()));
  }
  sync();  // nobody reads this rank's input any more
  next_step();
  return true;
}

bool CollectiveTransport::reduce_scatter_single_copy(const void* const* ins, char* out,
                                                     size_t count, DType dtype, ReduceOp op) {
  publish(ins, size_, count * dtype_size(dtype));
  sync();
  if (!all_reachable(size_, count * dtype_size(dtype) * size_)) return false;
  std::vector<Remote> remotes(size_), push(size_);
  for (int k = 0; k < size_; ++k) remotes[k] = remote(k, rank_);
  reduce_from_peers(out, static_cast<const char*>(ins[rank_]), remotes.data(), count, dtype, op,
                    push.data());
  sync();  // nobody reads this rank's inputs any more
  next_step();
  return true;
}

char* CollectiveTransport::half_of(int r) const {
  return layout_->slots + static_cast<size_t>(r) * options_.slot_bytes +
         (step_ % 2) * half_bytes();
}

bool CollectiveTransport::aborted() const {
  return layout_->header->aborted.load(std::memory_order_acquire) != 0;
}

void CollectiveTransport::abort(const std::string& reason) {
  Header& h = *layout_->header;
  uint32_t expected = 0;
  if (h.aborted.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    h.abort_rank = rank_;
    std::snprintf(h.abort_reason, sizeof(h.abort_reason), "%s", reason.c_str());
    h.aborted.store(2, std::memory_order_release);
  }
  h.doorbell.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(h.doorbell);
  for (int r = 0; r < size_; ++r) {
    layout_->controls[r].doorbell.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(layout_->controls[r].doorbell);
  }
}

void CollectiveTransport::fail(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

template <class Ready, class Awaited>
void CollectiveTransport::wait_for(Ready&& ready, Awaited&& awaited, const char* what,
                                   std::atomic<uint32_t>& word) {
  for (int i = 0; i < 64; ++i) {
    if (ready()) return;
    __builtin_ia32_pause();
  }
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const uint32_t seen = word.load(std::memory_order_acquire);
    if (ready()) return;
    check_health(what, start, awaited);
    futex_wait(word, seen, 2'000'000);
  }
}

void CollectiveTransport::check_health(const char* what,
                                       std::chrono::steady_clock::time_point start,
                                       const std::function<std::vector<int>()>& awaited) {
  Header& h = *layout_->header;
  if (const uint32_t a = h.aborted.load(std::memory_order_acquire); a != 0) {
    for (int i = 0; i < 1000 && h.aborted.load(std::memory_order_acquire) != 2; ++i) {
      std::this_thread::yield();
    }
    fail(std::string(what) + " on rank " + std::to_string(rank_) +
         " failed: the group was aborted by rank " + std::to_string(h.abort_rank) + ": " +
         h.abort_reason);
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - last_health_check_ > std::chrono::milliseconds(100)) {
    last_health_check_ = now;
    // Only the ranks still awaited matter: a peer that passed this barrier and then exited
    // normally is no fault. It may have done both since `awaited` was read, so an exited rank
    // is blamed only if it is still awaited when read again: its progress is final by then.
    const std::vector<int> late = awaited ? awaited() : std::vector<int>{};
    for (int r : late) {
      if (r == rank_) continue;
      const int pid = layout_->controls[r].pid.load(std::memory_order_acquire);
      if (process_ended(pid)) {
        const std::vector<int> again = awaited();
        if (std::find(again.begin(), again.end(), r) == again.end()) continue;
        const std::string reason = "rank " + std::to_string(r) + " (pid " +
                                   std::to_string(pid) +
                                   ") exited while the group still needed it during " + what;
        abort(reason);
        fail(std::string(what) + " on rank " + std::to_string(rank_) + " failed: " + reason);
      }
    }
  }
  if (now - start > options_.timeout) {
    const std::string reason =
        std::string(what) + " timed out after " + std::to_string(options_.timeout.count()) +
        " ms on rank " + std::to_string(rank_) + " waiting for rank(s) " +
        rank_list(awaited ? awaited() : std::vector<int>{}) +
        " (a peer is hung, or the ranks called collectives in different orders)";
    abort(reason);
    fail(reason);
  }
}

void CollectiveTransport::begin(OpKind kind, DType dtype, uint64_t count, int64_t root,
                                uint64_t aux) {
  if (aborted()) check_health(op_kind_name(kind), std::chrono::steady_clock::now(), nullptr);
  ++op_seq_;
  current_op_ = kind;
  Descriptor& d = layout_->controls[rank_].desc[op_seq_ % 2];
  d = Descriptor{op_seq_, static_cast<uint32_t>(kind), static_cast<uint32_t>(dtype), count, root,
                 aux};
  check_pending_ = true;
}

void CollectiveTransport::sync() {
  ++epoch_;
  const uint64_t target = epoch_;
  Header& h = *layout_->header;
  layout_->controls[rank_].arrived.store(target, std::memory_order_release);
  h.doorbell.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(h.doorbell);
  const int n = size_;
  RankControl* controls = layout_->controls;
  wait_for(
      [&] {
        for (int r = 0; r < n; ++r) {
          if (controls[r].arrived.load(std::memory_order_acquire) < target) return false;
        }
        return true;
      },
      [&] {
        std::vector<int> late;
        for (int r = 0; r < n; ++r) {
          if (controls[r].arrived.load(std::memory_order_acquire) < target) late.push_back(r);
        }
        return late;
      },
      op_kind_name(current_op_), h.doorbell);
  if (check_pending_) {
    check_pending_ = false;
    check_descriptors();
  }
}

void CollectiveTransport::check_descriptors() {
  const Descriptor& mine = layout_->controls[rank_].desc[op_seq_ % 2];
  bool same = true;
  for (int r = 0; r < size_; ++r) {
    const Descriptor& d = layout_->controls[r].desc[op_seq_ % 2];
    same = same && d.seq == mine.seq && d.kind == mine.kind && d.dtype == mine.dtype &&
           d.count == mine.count && d.root == mine.root && d.aux == mine.aux;
  }
  if (same) return;
  std::string message = std::string(op_kind_name(static_cast<OpKind>(mine.kind))) +
                        ": the ranks of the group called different collectives (call #" +
                        std::to_string(mine.seq) + " of this group):";
  for (int r = 0; r < size_; ++r) {
    const Descriptor& d = layout_->controls[r].desc[op_seq_ % 2];
    message += " rank " + std::to_string(r) + ": " + describe(d) +
               (d.seq != mine.seq ? " (its call #" + std::to_string(d.seq) + ")" : "") + ";";
  }
  message += " every rank must call the same collectives in the same order, with the same sizes, "
             "dtype, reduce op and root";
  fail(message);
}

void CollectiveTransport::barrier() {
  begin(OpKind::kBarrier, DType::kOpaque1, 0, -1, 0);
  sync();
}

void CollectiveTransport::broadcast(void* data, size_t bytes, int root) {
  begin(OpKind::kBroadcast, DType::kOpaque1, bytes, root, 0);
  char* p = static_cast<char*>(data);
  if (use_single_copy(bytes, bytes)) {
    const void* mine[1] = {data};
    publish(mine, 1, bytes);
    sync();
    if (all_reachable(1, bytes)) {
      if (rank_ != root) peer_read(root, remote(root, 0), p, bytes);
      sync();  // nobody reads the root's buffer any more
      next_step();
      return;
    }
    next_step();  // some buffer is out of reach: the slots, from the other half
  }
  size_t off = 0;
  do {
    const size_t c = std::min(half_bytes(), bytes - off);
    if (rank_ == root) std::memcpy(my_half(), p + off, c);
    sync();
    if (rank_ != root) std::memcpy(p + off, half_of(root), c);
    next_step();
    off += c;
  } while (off < bytes);
}

void CollectiveTransport::allreduce(void* data, size_t count, DType dtype, ReduceOp op) {
  reduce(data, count, dtype, op, -1);
}

void CollectiveTransport::reduce(void* data, size_t count, DType dtype, ReduceOp op, int root) {
  if (!reduce_supported(dtype, op)) transport::reduce(nullptr, nullptr, 0, 0, dtype, op);  // throws
  begin(root < 0 ? OpKind::kAllreduce : OpKind::kReduce, dtype, count, root,
        static_cast<uint64_t>(op));
  const size_t esz = dtype_size(dtype);
  char* p = static_cast<char*>(data);
  if (use_single_copy(count * esz)) {
    if (reduce_single_copy(p, count, dtype, op, root)) return;
    next_step();  // some buffer is out of reach: the slots, from the other half
  }
  const size_t chunk = half_bytes() / esz;
  std::vector<const void*> srcs(size_);
  size_t off = 0;
  do {
    const size_t c = std::min(chunk, count - off);
    std::memcpy(my_half(), p + off * esz, c * esz);
    sync();
    if (c * esz <= kDirectReduceBytes) {
      // Small: every rank (or the root) reduces the whole chunk from all slots itself, in rank
      // order, so the results are the same bits everywhere, after one barrier instead of two.
      if (root < 0 || root == rank_) {
        for (int k = 0; k < size_; ++k) srcs[k] = half_of(k);
        transport::reduce(p + off * esz, srcs.data(), size_, c, dtype, op);
      }
      next_step();
      off += c;
      continue;
    }
    // Each rank reduces its own share of the chunk, in rank order, into its own slot.
    const size_t lo = c * rank_ / size_, hi = c * (rank_ + 1) / size_;
    for (int k = 0; k < size_; ++k) srcs[k] = half_of(k) + lo * esz;
    transport::reduce(my_half() + lo * esz, srcs.data(), size_, hi - lo, dtype, op);
    sync();
    if (root < 0 || root == rank_) {
      for (int r = 0; r < size_; ++r) {
        const size_t rlo = c * r / size_, rhi = c * (r + 1) / size_;
        std::memcpy(p + (off + rlo) * esz, half_of(r) + rlo * esz, (rhi - rlo) * esz);
      }
    }
    next_step();
    off += c;
  } while (off < count);
}

void CollectiveTransport::allgather(const void* in, void* const* outs, size_t bytes) {
  gather(in, outs, bytes, -1);
}

void CollectiveTransport::gather(const void* in, void* const* outs, size_t bytes, int root) {
  begin(root < 0 ? OpKind::kAllgather : OpKind::kGather, DType::kOpaque1, bytes, root, 0);
  const char* src = static_cast<const char*>(in);
  if (use_single_copy(bytes * size_, bytes)) {
    if (gather_single_copy(src, outs, bytes, root)) return;
    next_step();  // some buffer is out of reach: the slots, from the other half
  }
  size_t off = 0;
  do {
    const size_t c = std::min(half_bytes(), bytes - off);
    std::memcpy(my_half(), src + off, c);
    sync();
    if (root < 0 || root == rank_) {
      for (int r = 0; r < size_; ++r) {
        std::memcpy(static_cast<char*>(outs[r]) + off, r == rank_ ? src + off : half_of(r), c);
      }
    }
    next_step();
    off += c;
  } while (off < bytes);
}

void CollectiveTransport::scatter(const void* const* ins, void* out, size_t bytes, int root) {
  begin(OpKind::kScatter, DType::kOpaque1, bytes, root, 0);
  const size_t stride = half_bytes() / size_ / 64 * 64;
  char* dst = static_cast<char*>(out);
  size_t off = 0;
  do {
    const size_t c = std::min(stride, bytes - off);
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        std::memcpy(my_half() + r * stride, static_cast<const char*>(ins[r]) + off, c);
      }
    }
    sync();
    std::memcpy(dst + off, half_of(root) + rank_ * stride, c);
    next_step();
    off += c;
  } while (off < bytes);
}

void CollectiveTransport::reduce_scatter(const void* const* ins, void* out, size_t count,
                                         DType dtype, ReduceOp op) {
  if (!reduce_supported(dtype, op)) transport::reduce(nullptr, nullptr, 0, 0, dtype, op);  // throws
  begin(OpKind::kReduceScatter, dtype, count, -1, static_cast<uint64_t>(op));
  const size_t esz = dtype_size(dtype);
  if (use_single_copy(count * esz * size_)) {
    if (reduce_scatter_single_copy(ins, static_cast<char*>(out), count, dtype, op)) return;
    next_step();  // some buffer is out of reach: the slots, from the other half
  }
  const size_t stride = half_bytes() / size_ / 64 * 64;
  const size_t chunk = stride / esz;
  char* dst = static_cast<char*>(out);
  std::vector<const void*> srcs(size_);
  size_t off = 0;
  do {
    const size_t c = std::min(chunk, count - off);
    for (int r = 0; r < size_; ++r) {
      std::memcpy(my_half() + r * stride, static_cast<const char*>(ins[r]) + off * esz, c * esz);
    }
    sync();
    for (int k = 0; k < size_; ++k) srcs[k] = half_of(k) + rank_ * stride;
    transport::reduce(dst + off * esz, srcs.data(), size_, c, dtype, op);
    next_step();
    off += c;
  } while (off < count);
}

void CollectiveTransport::alltoall(const void* const* ins, const size_t* send_bytes,
                                   void* const* outs, const size_t* recv_bytes) {
  begin(OpKind::kAlltoall, DType::kOpaque1, 0, -1, 0);
  const int n = size_;
  // Step 1: everyone publishes what it sends and expects; all ranks see the same table, so a
  // disagreement fails on every rank alike.
  auto* table = reinterpret_cast<uint64_t*>(my_half());
  for (int r = 0; r < n; ++r) {
    table[r] = send_bytes[r];
    table[n + r] = recv_bytes[r];
  }
  // Behind the sizes, where each send buffer is, for peers to read it in place (mapped device
  // memory only: cross-memory attach does not pay for the splits' sizes here).
  uint64_t* places = table + 2 * n;
  for (int d = 0; d < n; ++d) {
    uint64_t* e = places + d * kEntryWords;
    e[0] = reinterpret_cast<uint64_t>(ins[d]);
    e[1] = e[2] = e[3] = 0;
    if (!mapped_ || d == rank_ || send_bytes[d] == 0) continue;
    if (const auto at = SharedHbm::instance().locate(ins[d], send_bytes[d])) {
      e[1] = at->alloc_offset;
      e[2] = at->alloc_bytes;
      e[3] = at->offset_in_alloc;
    }
  }
  sync();
  uint64_t largest = 0;
  std::string mismatch;
  for (int s = 0; s < n; ++s) {
    const auto* sent = reinterpret_cast<const uint64_t*>(half_of(s));
    for (int d = 0; d < n; ++d) {
      const uint64_t expected = reinterpret_cast<const uint64_t*>(half_of(d))[n + s];
      largest = std::max<uint64_t>(largest, sent[d]);
      if (sent[d] != expected && mismatch.size() < 400) {
        mismatch += " rank " + std::to_string(s) + " sends " + std::to_string(sent[d]) +
                    " bytes to rank " + std::to_string(d) + ", which expects " +
                    std::to_string(expected) + ";";
      }
    }
  }
  if (!mismatch.empty()) {
    fail("alltoall: the split sizes of the ranks disagree:" + mismatch +
         " each rank's output split for a peer must equal that peer's input split for it");
  }
  // Mapped: every rank copies what each peer sends it straight from the peer's buffer, when every
  // buffer that crosses between two ranks is mapped (all ranks read the same tables, so all agree).
  bool mapped = mapped_ && largest * n >= options_.mapped_min_bytes;
  for (int s = 0; s < n && mapped; ++s) {
    const auto* sent = reinterpret_cast<const uint64_t*>(half_of(s));
    for (int d = 0; d < n && mapped; ++d) {
      mapped = d == s || sent[d] == 0 || sent[2 * n + d * kEntryWords + 2] != 0;
    }
  }
  if (mapped) {
    ++mapped_ops_;
    std::vector<CopyPart> parts;  // every peer's part, copied together (StreamingCopy.h)
    for (int s = 0; s < n; ++s) {
      if (recv_bytes[s] == 0) continue;
      if (s == rank_) {
        std::memmove(outs[s], ins[s], recv_bytes[s]);
        continue;
      }
      const uint64_t* e =
          reinterpret_cast<const uint64_t*>(half_of(s)) + 2 * n + rank_ * kEntryWords;
      parts.push_back({outs[s], map_entry(s, e), recv_bytes[s]});
    }
    copy_parts(parts.data(), static_cast<int>(parts.size()));
    sync();  // nobody reads this rank's send buffers any more
    next_step();
    return;
  }
  next_step();
  const size_t region = half_bytes() / n / 64 * 64;
  const uint64_t rounds = (largest + region - 1) / region;
  for (uint64_t t = 0; t < rounds; ++t) {
    const size_t lo = t * region;
    for (int d = 0; d < n; ++d) {
      if (lo < send_bytes[d]) {
        std::memcpy(my_half() + d * region, static_cast<const char*>(ins[d]) + lo,
                    std::min(region, send_bytes[d] - lo));
      }
    }
    sync();
    for (int s = 0; s < n; ++s) {
      if (lo < recv_bytes[s]) {
        std::memcpy(static_cast<char*>(outs[s]) + lo, half_of(s) + rank_ * region,
                    std::min(region, recv_bytes[s] - lo));
      }
    }
    next_step();
  }
}

// ---- point to point ----------------------------------------------------------------------------

std::shared_ptr<P2pRequest> CollectiveTransport::post_send(int peer, uint64_t tag,
                                                           const void* data, size_t bytes) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    fail("send: peer rank " + std::to_string(peer) + " is not another rank of this group of " +
         std::to_string(size_));
  }
  auto r = std::make_shared<P2pRequest>();
  r->send_ = true;
  r->peer_ = peer;
  r->tag_ = tag;
  r->buffer_ = const_cast<char*>(static_cast<const char*>(data));
  r->bytes_ = bytes;
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  sends_[peer].push_back(r);
  progress_locked();
  return r;
}

std::shared_ptr<P2pRequest> CollectiveTransport::post_recv(int peer, uint64_t tag, void* data,
                                                           size_t bytes) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    fail("recv: peer rank " + std::to_string(peer) + " is not another rank of this group of " +
         std::to_string(size_));
  }
  auto r = std::make_shared<P2pRequest>();
  r->peer_ = peer;
  r->tag_ = tag;
  r->buffer_ = static_cast<char*>(data);
  r->bytes_ = bytes;
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  r->posted_ = ++recvs_posted_;
  recvs_[peer].push_back(r);
  progress_locked();
  return r;
}

std::shared_ptr<P2pRequest> CollectiveTransport::post_recv_any(uint64_t tag, void* data,
                                                               size_t bytes) {
  if (size_ < 2) fail("recv from any rank: this group of 1 rank has no other rank to send");
  auto r = std::make_shared<P2pRequest>();
  r->any_source_ = true;
  r->peer_ = -1;
  r->tag_ = tag;
  r->buffer_ = static_cast<char*>(data);
  r->bytes_ = bytes;
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  r->posted_ = ++recvs_posted_;
  any_source_recvs_.push_back(r);
  progress_locked();
  return r;
}

CollectiveTransport::AnySourceMatch CollectiveTransport::match_any_source_locked(int peer) {
  auto& queue = recvs_[peer];
  // Only between messages: one already being received belongs to its receive.
  if (!queue.empty() && queue.front()->header_done_ > 0) return kNotClaimed;
  Ring& ring = layout_->ring(peer, rank_);
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
  copy_from_ring(layout_->ring_bytes(peer, rank_), options_.channel_bytes, tail,
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

bool CollectiveTransport::progress_one(P2pRequest& r) {
  const size_t capacity = options_.channel_bytes;
  bool moved = false;
  if (r.send_) {
    Ring& ring = layout_->ring(rank_, r.peer_);
    char* data = layout_->ring_bytes(rank_, r.peer_);
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
      layout_->controls[r.peer_].doorbell.fetch_add(1, std::memory_order_acq_rel);
      futex_wake(layout_->controls[r.peer_].doorbell);
    }
    if (r.header_done_ == kMessageHeader && r.payload_done_ == r.bytes_) {
      r.done_.store(true, std::memory_order_release);
    }
    return moved;
  }
  Ring& ring = layout_->ring(r.peer_, rank_);
  const char* data = layout_->ring_bytes(r.peer_, rank_);
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
      r.error_ = "recv on rank " + std::to_string(rank_) + " from rank " +
                 std::to_string(r.peer_) +
                 (r.any_source_ ? " (a receive from any rank, given this message by its tag)"
                                : "") +
                 " expected " + std::to_string(r.bytes_) +
                 " bytes with tag " + std::to_string(r.tag_) + ", but the next message rank " +
                 std::to_string(r.peer_) + " sent has " + std::to_string(header[1]) +
                 " bytes with tag " + std::to_string(header[0]) +
                 " (sends and receives between two ranks must match in order, size, dtype and "
                 "tag)";
      ring.tail.store(tail, std::memory_order_release);
      r.done_.store(true, std::memory_order_release);
      abort(r.error_);
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
    layout_->controls[r.peer_].doorbell.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(layout_->controls[r.peer_].doorbell);
  }
  if (r.header_done_ == kMessageHeader && r.payload_done_ == r.bytes_) {
    r.done_.store(true, std::memory_order_release);
  }
  return moved;
}

bool CollectiveTransport::progress_locked() {
  bool moved = false;
  for (auto& queue : sends_) {
    while (!queue.empty()) {
      moved = progress_one(*queue.front()) || moved;
      if (!queue.front()->done()) break;
      queue.pop_front();
    }
  }
  // Receives, peer by peer; before each of a peer's messages an any-source receive may claim it.
  for (int k = 0; k < size_; ++k) {
    const int peer = (any_source_cursor_ + k) % size_;
    auto& queue = recvs_[peer];
    for (;;) {
      if (!any_source_recvs_.empty() && match_any_source_locked(peer) == kWait) break;
      if (queue.empty()) break;
      moved = progress_one(*queue.front()) || moved;
      if (!queue.front()->done()) break;
      queue.pop_front();
    }
  }
  if (!any_source_recvs_.empty()) any_source_cursor_ = (any_source_cursor_ + 1) % size_;
  return moved;
}

bool CollectiveTransport::test(P2pRequest& request) {
  if (!request.done()) {
    std::lock_guard<std::mutex> lock(p2p_mutex_);
    progress_locked();
  }
  if (request.done() && !request.error_.empty()) fail(request.error_);
  return request.done();
}

void CollectiveTransport::wait_any_source_health(const P2pRequest& request,
                                                 std::chrono::steady_clock::time_point start,
                                                 const std::function<bool()>& ready) {
  // Any rank may still send, so only when every other rank has exited can none come any more.
  // A rank may have sent and exited since the caller last looked: once all have exited, what
  // they sent is final, so the request is offered the rings once more before it fails.
  bool all_ended = true;
  for (int r = 0; r < size_ && all_ended; ++r) {
    if (r != rank_ && !process_ended(layout_->controls[r].pid.load(std::memory_order_acquire))) {
      all_ended = false;
    }
  }
  const std::string which = "recv from any rank on rank " + std::to_string(rank_) + " (tag " +
                            std::to_string(request.tag_) + ", " + std::to_string(request.bytes_) +
                            " bytes)";
  if (all_ended) {
    if (ready()) return;
    const std::string reason = which + " failed: every other rank of the group exited without "
                                       "sending a message with that tag";
    abort(reason);
    fail(reason);
  }
  if (std::chrono::steady_clock::now() - start > options_.timeout) {
    const std::string reason = which + " timed out after " +
                               std::to_string(options_.timeout.count()) +
                               " ms (no rank sent a message with that tag)";
    abort(reason);
    fail(reason);
  }
}

void CollectiveTransport::wait(P2pRequest& request) {
  const char* what = request.send_ ? "send" : "recv";
  int peer = request.peer_;  // -1 while an any-source receive is unmatched
  auto ready = [&] {
    std::lock_guard<std::mutex> lock(p2p_mutex_);
    progress_locked();
    peer = request.peer_;
    return request.done();
  };
  for (int i = 0; i < 64 && !ready(); ++i) __builtin_ia32_pause();
  const auto start = std::chrono::steady_clock::now();
  std::atomic<uint32_t>& word = layout_->controls[rank_].doorbell;
  while (!request.done()) {
    const uint32_t seen = word.load(std::memory_order_acquire);
    if (ready()) break;
    if (aborted()) check_health(what, start, nullptr);
    if (peer < 0) {
      wait_any_source_health(request, start, ready);
      if (!request.done()) futex_wait(word, seen, 2'000'000);
      continue;
    }
    // Only the peer matters to a point-to-point wait. It may have finished its part and exited
    // since `ready` ran: once it has exited, that part is final, so look once more.
    const int pid = layout_->controls[peer].pid.load(std::memory_order_acquire);
    if (process_ended(pid)) {
      if (ready()) break;
      const std::string reason = std::string(what) + " on rank " + std::to_string(rank_) +
                                 " failed: rank " + std::to_string(peer) + " (pid " +
                                 std::to_string(pid) + ") exited before the message completed";
      abort(reason);
      fail(reason);
    }
    if (std::chrono::steady_clock::now() - start > options_.timeout) {
      const std::string reason = std::string(what) + " on rank " + std::to_string(rank_) +
                                 " with rank " + std::to_string(peer) + " timed out after " +
                                 std::to_string(options_.timeout.count()) +
                                 " ms (the peer is hung or never posted the matching call)";
      abort(reason);
      fail(reason);
    }
    futex_wait(word, seen, 2'000'000);
  }
  if (!request.error_.empty()) fail(request.error_);
}

}  // namespace nrtsim::transport
