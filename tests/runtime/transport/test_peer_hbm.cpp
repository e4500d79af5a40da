// The peers' device memory: SharedHbm's file of this process, and PeerHbm, which maps a peer's
// file read-only.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "runtime/SharedHbm.h"
#include "runtime/transport/PeerHbm.h"

TEST(SharedHbm, AllocationsAreLocatedAndTheirPagesGoBackWhenFreed) {
  nrtsim::SharedHbm& hbm = nrtsim::SharedHbm::instance();
  EXPECT_EQ(hbm.allocate(nrtsim::SharedHbm::kMinBytes - 1), nullptr);  // small: private memory
  char* a = static_cast<char*>(hbm.allocate(100'000));
  char* b = static_cast<char*>(hbm.allocate(nrtsim::SharedHbm::kMinBytes));
  ASSERT_NE(a, nullptr) << hbm.status();
  ASSERT_NE(b, nullptr);
  const auto at = hbm.locate(a + 1000, 5000);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->alloc_bytes, 102'400u);  // rounded up to pages
  EXPECT_EQ(at->offset_in_alloc, 1000u);
  EXPECT_FALSE(hbm.locate(a + 100'000, 4096).has_value());  // runs past the allocation
  const auto bt = hbm.locate(b, 1);
  ASSERT_TRUE(bt.has_value());
  EXPECT_NE(bt->alloc_offset, at->alloc_offset);
  std::memset(a, 7, 100'000);
  EXPECT_TRUE(hbm.release(a));
  EXPECT_FALSE(hbm.locate(a, 1).has_value());
  EXPECT_FALSE(hbm.release(a));
  // A fresh allocation never takes a freed one's file offset (peers' mappings stay truthful).
  char* c = static_cast<char*>(hbm.allocate(100'000));
  ASSERT_NE(c, nullptr);
  EXPECT_GT(hbm.locate(c, 1)->alloc_offset, bt->alloc_offset);
  EXPECT_TRUE(hbm.release(b));
  EXPECT_TRUE(hbm.release(c));
}

// A peer's memory is mapped read-only: reading it works, writing it faults (no rank can corrupt
// another's device memory), and the file is found through /proc/<pid>/fd without any right to
// attach to the peer.
TEST(PeerHbm, MapsAPeersAllocationReadOnly) {
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t owner = ::fork();
  if (owner == 0) {
    nrtsim::SharedHbm& hbm = nrtsim::SharedHbm::instance();
    char* a = static_cast<char*>(hbm.allocate(1 << 20));
    if (a == nullptr) ::_exit(1);
    std::memset(a, 0x5a, 1 << 20);
    const auto file = hbm.file();
    const auto at = hbm.locate(a, 1 << 20);
    uint64_t message[5] = {static_cast<uint64_t>(file.fd), file.device, file.inode,
                           at->alloc_offset, at->alloc_bytes};
    (void)!::write(ready[1], message, sizeof(message));
    char c;
    (void)!::read(done[0], &c, 1);
    ::_exit(a[12345] == 0x5a ? 0 : 4);  // nobody changed it
  }
  uint64_t message[5];
  ASSERT_EQ(::read(ready[0], message, sizeof(message)), static_cast<ssize_t>(sizeof(message)));
  nrtsim::transport::PeerHbm peers(2);
  ASSERT_EQ(peers.open(1, owner, static_cast<int>(message[0]), message[1], message[2]), "");
  const char* mapped = peers.map(1, message[3], message[4], 1);
  ASSERT_NE(mapped, nullptr);
  EXPECT_EQ(mapped[12345], 0x5a);
  const pid_t writer = ::fork();
  if (writer == 0) {
    const_cast<char*>(mapped)[12345] = 1;  // must fault
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(writer, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS));
  (void)!::write(done[1], "x", 1);
  ::waitpid(owner, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
