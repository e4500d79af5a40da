#include "runtime/transport/ShmSegment.h"

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
                  " (the collective transport needs a writable /dev/shm with room for the "
                  "group's buffers)");
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

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail("shm_open(create)", name, errno);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    fail("ftruncate", name, err);
  }
  char* data = nullptr;
  try {
    data = map(fd, bytes, name);
  } catch (...) {
    ::shm_unlink(name.c_str());
    throw;
  }
  return ShmSegment(name, data, bytes);
}

ShmSegment ShmSegment::open(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) fail("shm_open", name, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("fstat", name, err);
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  return ShmSegment(name, map(fd, bytes, name), bytes);
}

void ShmSegment::unlink(const std::string& name) { ::shm_unlink(name.c_str()); }

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
      size_(std::exchange(other.size_, 0)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace nrtsim::transport
