// Transport tests between real processes: a group's ranks are forked children of the test (rank 0
// is the test process itself), each checks its own results, and the test collects the verdicts
// through their exit codes.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/Error.h"
#include "runtime/SharedHbm.h"
#include "runtime/transport/CollectiveTransport.h"

// In a rank's body: a failed check reports where and makes the rank's verdict false.
#define REQUIRE(cond)                                                                      \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "rank check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      return false;                                                                        \
    }                                                                                      \
  } while (0)

namespace forked_ranks {

using nrtsim::transport::CollectiveTransport;
using nrtsim::transport::TransportOptions;

inline std::unique_ptr<CollectiveTransport> connect(const std::string& name, int rank, int size,
                                                    const TransportOptions& o) {
  if (rank == 0) return CollectiveTransport::create(name, size, o);
  // Rank 0 may not have created the segment yet, or not written its header (the backend layer
  // orders this with its Store). Only those errors are retried: any other is the test's finding.
  for (int attempt = 0;; ++attempt) {
    try {
      return CollectiveTransport::join(name, rank, size, o);
    } catch (const nrtsim::Error& e) {
      const std::string m = e.what();
      const bool not_ready_yet = m.rfind("shared-memory segment ", 0) == 0 ||
                                 m.find("is not the group of") != std::string::npos;
      if (!not_ready_yet || attempt > 2000) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

// Runs body(rank, transport) in `size` processes; returns the exit codes of ranks 0..size-1
// (0: the body returned true, 1: false, 2: it threw, 100 + n: killed by signal n). `setup(rank)`
// runs in each child rank before it connects.
inline std::vector<int> run(const std::string& prefix, int size,
                            const std::function<bool(int, CollectiveTransport&)>& body,
                            const TransportOptions& o,
                            const std::function<void(int)>& setup = {}) {
  const std::string name = nrtsim::transport::ShmSegment::unique_name(prefix);
  std::vector<pid_t> children;
  for (int r = 1; r < size; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 1;
      try {
        if (setup) setup(r);
        auto t = connect(name, r, size, o);
        code = body(r, *t) ? 0 : 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 2;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  std::vector<int> codes(size, 0);
  try {
    auto t = connect(name, 0, size, o);
    codes[0] = body(0, *t) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank 0: %s\n", e.what());
    codes[0] = 2;
  }
  for (int r = 1; r < size; ++r) {
    int status = 0;
    ::waitpid(children[r - 1], &status, 0);
    codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
  }
  return codes;
}

// Options that make collectives cross many steps and messages wrap the rings.
inline TransportOptions small_options() {
  TransportOptions o;
  o.slot_bytes = 64 << 10;
  o.channel_bytes = 4096;
  o.timeout = std::chrono::milliseconds(10'000);
  return o;
}

// run() with the test's own segment prefix and, unless given, small_options().
inline std::vector<int> run_ranks(int size,
                                  const std::function<bool(int, CollectiveTransport&)>& body,
                                  const TransportOptions& o = small_options(),
                                  const std::function<void(int)>& setup = {}) {
  return run("nrtsim-test", size, body, o, setup);
}

// Buffers in this process's device memory file, where HbmAllocator puts large device tensors
// (what peers map); private memory when the file is off.
template <class T>
struct InHbm {
  using value_type = T;
  InHbm() = default;
  template <class U>
  InHbm(const InHbm<U>&) {}
  T* allocate(size_t n) {
    void* p = nrtsim::SharedHbm::instance().allocate(n * sizeof(T));
    return static_cast<T*>(p ? p : ::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t) {
    if (!nrtsim::SharedHbm::instance().release(p)) ::operator delete(p);
  }
  bool operator==(const InHbm&) const { return true; }
  bool operator!=(const InHbm&) const { return false; }
};

}  // namespace forked_ranks
