#include "runtime/transport/PeerHbm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

namespace nrtsim::transport {

PeerHbm::~PeerHbm() {
  for (const auto& [key, m] : mappings_) ::munmap(m.base, m.bytes);
  for (const int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

std::string PeerHbm::open(int peer, int pid, int fd, uint64_t device, uint64_t inode) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int mine = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (mine < 0) return "cannot open " + path + " (" + std::strerror(errno) + ")";
  struct stat st{};
  if (::fstat(mine, &st) != 0 || static_cast<uint64_t>(st.st_dev) != device ||
      static_cast<uint64_t>(st.st_ino) != inode) {
    ::close(mine);
    return path + " is not the device memory file the rank published (are the ranks in "
                  "different pid namespaces?)";
  }
  fds_[peer] = mine;
  return "";
}

const char* PeerHbm::map(int peer, uint64_t offset, uint64_t bytes, uint64_t use) {
  const auto key = std::make_pair(peer, offset);
  auto it = mappings_.find(key);
  if (it != mappings_.end() && it->second.bytes == bytes) {
    it->second.last_use = use;
    return it->second.base;
  }
  if (it != mappings_.end()) {  // cannot happen with SharedHbm's offsets; be safe anyway
    ::munmap(it->second.base, it->second.bytes);
    mappings_.erase(it);
  }
  if (mappings_.size() >= kMaxMappings) evict(use);
  // Populated at once: faulting the pages in one by one during the copy would cost more.
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fds_[peer],
                   static_cast<off_t>(offset));
  if (p == MAP_FAILED) return nullptr;
  mappings_.emplace(key, Mapping{static_cast<char*>(p), bytes, use});
  return static_cast<char*>(p);
}

void PeerHbm::evict(uint64_t use) {
  // Drop the older half of what the current operation does not use.
  std::vector<std::pair<uint64_t, std::pair<int, uint64_t>>> old;
  for (const auto& [key, m] : mappings_) {
    if (m.last_use != use) old.emplace_back(m.last_use, key);
  }
  std::sort(old.begin(), old.end());
  old.resize(std::max<size_t>(old.size() / 2, std::min<size_t>(old.size(), 1)));
  for (const auto& [last, key] : old) {
    const Mapping& m = mappings_.at(key);
    ::munmap(m.base, m.bytes);
    mappings_.erase(key);
  }
}

}  // namespace nrtsim::transport
