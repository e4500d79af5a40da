#include "runtime/nki/DeviceLoops.h"

#include <algorithm>
#include <string>

#include "runtime/Error.h"

namespace nrtsim::nki {

int32_t LoopNest::loop_at(size_t i) const {
  auto it = std::lower_bound(begins.begin(), begins.end(), static_cast<int32_t>(i));
  return it != begins.end() && *it == static_cast<int32_t>(i)
             ? static_cast<int32_t>(it - begins.begin())
             : -1;
}

LoopNest match_loops(const Program& p) {
  LoopNest nest;
  const size_t n = p.instructions.size();
  nest.partner.assign(n, -1);
  nest.innermost.assign(n, -1);
  std::vector<int32_t> open;  // loops whose end is still to come
  for (size_t i = 0; i < n; ++i) {
    const Opcode op = p.instructions[i].op;
    nest.innermost[i] = open.empty() ? -1 : open.back();
    if (op == Opcode::kLoopBegin) {
      nest.parent.push_back(open.empty() ? -1 : open.back());
      open.push_back(static_cast<int32_t>(nest.begins.size()));
      nest.begins.push_back(static_cast<int32_t>(i));
    } else if (op == Opcode::kLoopEnd) {
      if (open.empty()) {
        throw Error(ErrorCode::kInvalidArgument,
                    "NKI kernel '" + p.name + "': instruction " + std::to_string(i) +
                        " ends a device loop that was never begun");
      }
      const int32_t begin = nest.begins[static_cast<size_t>(open.back())];
      nest.partner[static_cast<size_t>(begin)] = static_cast<int32_t>(i);
      nest.partner[i] = begin;
      open.pop_back();
      nest.innermost[i] = open.empty() ? -1 : open.back();
    }
  }
  if (!open.empty()) {
    const int32_t begin = nest.begins[static_cast<size_t>(open.back())];
    throw Error(ErrorCode::kInvalidArgument,
                "NKI kernel '" + p.name + "': the device loop of line " +
                    std::to_string(p.instructions[static_cast<size_t>(begin)].line) +
                    " has no end");
  }
  return nest;
}

void widen_lifetimes(const LoopNest& nest, std::vector<int64_t>& first,
                     std::vector<int64_t>& last) {
  // Inner loops first: widening a buffer over an inner loop can make it cross an outer one.
  std::vector<size_t> order(nest.begins.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  auto size = [&](size_t k) {
    const int32_t b = nest.begins[k];
    return nest.partner[static_cast<size_t>(b)] - b;
  };
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return size(x) < size(y); });
  for (size_t k : order) {
    const int64_t b = nest.begins[k];
    const int64_t e = nest.partner[static_cast<size_t>(b)];
    for (size_t buf = 0; buf < first.size(); ++buf) {
      if (first[buf] < 0) continue;
      const bool meets = first[buf] <= e && last[buf] >= b;
      const bool inside = first[buf] > b && last[buf] < e;
      if (meets && !inside) {
        first[buf] = std::min(first[buf], b);
        last[buf] = std::max(last[buf], e);
      }
    }
  }
}

}  // namespace nrtsim::nki
