#include "runtime/transport/ShmSegment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "runtime/Error.h"

namespace nrtsim::transport {

namespace {
[[noreturn]] void fail(const std::string& what, const std::string& name, int err) {
  throw Error(ErrorCode::kConfiguration,
              "shared-memory segment " + name + ": " + what + " failed: " + std::strerror(err) +
                  " (the group's shared memory is an anonymous memory file: the host needs free "
                  "memory for the group's slots and rings, NRTSIM_COLLECTIVE_SLOT_BYTES and "
                  "NRTSIM_P2P_RING_BYTES make them smaller, and the ranks must run as one user)");
}

char* map(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    fail("mmap", name, err);
  }
  ::close(fd);
  return static_cast<char*>(p);
}
}  // namespace

// The segment is an anonymous memory file (memfd): it has no name in /dev/shm at all, so nothing
// can be left behind, even if its creator is killed before the others have mapped it. The others
// reach it through the creator's /proc/<pid>/fd entry (same user), found by its label.
ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  const std::string label = name.substr(name.find_first_not_of('/'));
  const int fd = ::memfd_create(label.c_str(), MFD_CLOEXEC);
  if (fd < 0) fail("memfd_create", name, errno);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    fail("ftruncate", name, err);
  }
  // The descriptor stays open while the segment lives: joiners open it through /proc.
  char* data = nullptr;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    fail("mmap", name, err);
  }
  data = static_cast<char*>(p);
  ShmSegment segment(name, data, bytes);
  segment.fd_ = fd;
  return segment;
}

ShmSegment ShmSegment::open(const std::string& name) {
  // The creator's pid is part of the name (unique_name): look for its memfd of that label.
  const std::string label = name.substr(name.find_first_not_of('/'));
  const auto dash = label.rfind('-');
  const auto pid_dash = dash == std::string::npos ? std::string::npos : label.rfind('-', dash - 1);
  if (pid_dash == std::string::npos) fail("open (a name without the creator's pid)", name, EINVAL);
  const std::string pid = label.substr(pid_dash + 1, dash - pid_dash - 1);
  const std::string dir = "/proc/" + pid + "/fd";
  const std::string wanted = "/memfd:" + label;
  DIR* fds = ::opendir(dir.c_str());
  if (fds == nullptr) fail("open " + dir + " (is the creating rank still alive?)", name, errno);
  std::string path;
  while (dirent* entry = ::readdir(fds)) {
    const std::string candidate = dir + "/" + entry->d_name;
    char target[512];
    const ssize_t n = ::readlink(candidate.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::string(target).rfind(wanted, 0) == 0) {
      path = candidate;
      break;
    }
  }
  ::closedir(fds);
  if (path.empty()) fail("find the creator's segment", name, ENOENT);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) fail("open " + path, name, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("fstat", name, err);
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  return ShmSegment(name, map(fd, bytes, name), bytes);
}

void ShmSegment::unlink(const std::string&) {
  // Nothing to remove: the segment never had a name (memfd). Kept so that callers can say where
  // the name would stop being needed.
}

std::string ShmSegment::unique_name(const std::string& prefix) {
  std::random_device device;
  std::mt19937_64 bits((static_cast<uint64_t>(device()) << 32) ^ device() ^
                       static_cast<uint64_t>(::getpid()));
  char tail[40];
  std::snprintf(tail, sizeof(tail), "-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(bits()));
  return "/" + prefix + tail;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    name_ = std::move(other.name_);
    if (fd_ >= 0) ::close(fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace nrtsim::transport
