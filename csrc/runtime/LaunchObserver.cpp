#include "runtime/LaunchObserver.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <vector>

namespace nrtsim {

namespace detail {
std::atomic<int> g_observer_count{0};
}

namespace {
std::shared_mutex& observers_mutex() {
  static auto* mutex = new std::shared_mutex();  // never destroyed: launches may run at exit
  return *mutex;
}
std::vector<LaunchObserver*>& observers() {
  static auto* list = new std::vector<LaunchObserver*>();
  return *list;
}
thread_local uint64_t t_correlation_id = 0;
}  // namespace

void add_observer(LaunchObserver* observer) {
  std::unique_lock<std::shared_mutex> lock(observers_mutex());
  auto& list = observers();
  if (std::find(list.begin(), list.end(), observer) != list.end()) return;
  list.push_back(observer);
  detail::g_observer_count.store(static_cast<int>(list.size()), std::memory_order_release);
}

void remove_observer(LaunchObserver* observer) {
  std::unique_lock<std::shared_mutex> lock(observers_mutex());
  auto& list = observers();
  list.erase(std::remove(list.begin(), list.end(), observer), list.end());
  detail::g_observer_count.store(static_cast<int>(list.size()), std::memory_order_release);
}

void detail::publish_slow(const LaunchRecord& record) {
  std::shared_lock<std::shared_mutex> lock(observers_mutex());
  for (LaunchObserver* observer : observers()) observer->on_launch(record);
}

uint64_t current_correlation_id() { return t_correlation_id; }
void set_correlation_id(uint64_t id) { t_correlation_id = id; }

}  // namespace nrtsim
