#include "backend/core/OpTracking.h"

#include <mutex>
#include <set>
#include <string_view>

#include "runtime/KernelLaunch.h"

namespace torch_neuronx {

namespace {
std::mutex g_mutex;
std::vector<std::string>& fallback_list() {
  static auto* list = new std::vector<std::string>();
  return *list;
}
std::set<std::string>& fallback_set() {
  static auto* set = new std::set<std::string>();
  return *set;
}
}  // namespace

bool record_fallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!fallback_set().insert(op).second) return false;
  fallback_list().push_back(op);
  return true;
}

std::vector<std::string> fallback_ops() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return fallback_list();
}

std::vector<std::string> executed_ops() {
  std::vector<std::string> ops;
  std::set<std::string> seen;
  for (const auto& row : nrtsim::ExecutionTrace::global().snapshot()) {
    // Runtime-internal work (e.g. nrtsim::copy_*) is not an ATen op.
    if (std::string_view(row.op).starts_with("aten::") && seen.insert(row.op).second) {
      ops.push_back(row.op);
    }
  }
  for (const auto& op : fallback_ops()) {
    if (seen.insert(op).second) ops.push_back(op);
  }
  return ops;
}

void clear_op_tracking() {
  nrtsim::ExecutionTrace::global().clear();
  std::lock_guard<std::mutex> lock(g_mutex);
  fallback_list().clear();
  fallback_set().clear();
}

}  // namespace torch_neuronx
