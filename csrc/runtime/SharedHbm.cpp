#include "runtime/SharedHbm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/Env.h"

namespace nrtsim {

SharedHbm& SharedHbm::instance() {
  // Never destroyed: device memory may be freed by static objects during exit.
  static SharedHbm* hbm = new SharedHbm();
  return *hbm;
}

SharedHbm::SharedHbm() = default;

bool SharedHbm::open_file_locked() {
  const int pid = static_cast<int>(::getpid());
  if (owner_pid_ == pid) return fd_ >= 0;
  // First use, or the first in a forked child: the inherited descriptor is the parent's file.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  id_ = FileId{};
  owner_pid_ = pid;
  next_offset_ = 0;
  if (env::switch_value("NRTSIM_SHARED_HBM") == false) {
    status_ = "off: NRTSIM_SHARED_HBM=0";
    return false;
  }
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, "nrtsim-hbm", MFD_CLOEXEC));
  struct stat st{};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    status_ = std::string("off: memfd_create failed (") + std::strerror(errno) +
              "); device memory is private to each process";
    if (fd >= 0) ::close(fd);
    return false;
  }
  fd_ = fd;
  id_ = FileId{fd, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  status_ = "on";
  return true;
}

SharedHbm::FileId SharedHbm::file() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_file_locked()) return FileId{};
  return id_;
}

void* SharedHbm::allocate(size_t bytes) {
  if (bytes < kMinBytes) return nullptr;
  const size_t size = (bytes + kPage - 1) / kPage * kPage;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_file_locked()) return nullptr;
  const uint64_t offset = next_offset_;
  // The file only grows; freed ranges are holes that hold no memory.
  if (::ftruncate(fd_, static_cast<off_t>(offset + size)) != 0) return nullptr;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                   static_cast<off_t>(offset));
  if (p == MAP_FAILED) return nullptr;
  next_offset_ = offset + size;
  ranges_.insert(p, size);
  allocations_.emplace(reinterpret_cast<uintptr_t>(p), Allocation{offset, size, owner_pid_});
  return p;
}

bool SharedHbm::release(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocations_.end()) return false;
  const Allocation a = it->second;
  allocations_.erase(it);
  ranges_.erase(ptr);
  ::munmap(ptr, a.bytes);
  // Give the pages back to the host, but only from this process's own file: a forked child must
  // not take memory from under its parent.
  if (a.owner_pid == owner_pid_ && owner_pid_ == static_cast<int>(::getpid()) && fd_ >= 0) {
    ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(a.offset),
                static_cast<off_t>(a.bytes));
  }
  return true;
}

std::optional<SharedHbm::Location> SharedHbm::locate(const void* ptr, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::optional<std::pair<const void*, size_t>> range = ranges_.find(ptr);
  if (!range) return std::nullopt;
  const auto start = reinterpret_cast<uintptr_t>(range->first);
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  if (bytes > range->second - (a - start)) return std::nullopt;
  const Allocation& alloc = allocations_.at(start);
  if (alloc.owner_pid != owner_pid_ || owner_pid_ != static_cast<int>(::getpid())) {
    return std::nullopt;
  }
  return Location{alloc.offset, alloc.bytes, a - start};
}

}  // namespace nrtsim
