#include "runtime/cost/LayerSplit.h"

#include <cmath>
#include <map>
#include <string>

#include "runtime/Error.h"

namespace nrtsim::cost {

namespace {

// What the projection prices of an op, without its work: ops of one shape whose work differs
// are the same op at another size.
std::string shape_key(const TracedOp& op) {
  return op.op + '|' + op.phase + '|' + std::to_string(static_cast<int>(op.kind)) + '|' +
         std::to_string(static_cast<int>(op.work.precision)) + '|' + (op.attention ? "a" : "-") +
         (op.sequence_parallel ? "s" : "-") + '|' + std::to_string(static_cast<int>(op.collective)) +
         '|' + op.group;
}

std::string key_of(const TracedOp& op) {
  std::string key = shape_key(op);
  for (const EngineWork& e : op.work.engines) {
    key += '|' + std::to_string(e.ops) + ',' + std::to_string(e.bytes_read) + ',' +
           std::to_string(e.bytes_written);
  }
  key += '|' + std::to_string(op.tensor_tile_ops) + '|' + std::to_string(op.weight_bytes_read) +
         '|' + std::to_string(op.collective_bytes);
  return key;
}

// a - b, field by field; false when a field of b exceeds a's.
bool subtract(const TracedOp& a, const TracedOp& b, TracedOp& out) {
  out = a;
  auto sub = [](uint64_t x, uint64_t y, uint64_t& r) {
    if (y > x) return false;
    r = x - y;
    return true;
  };
  for (size_t i = 0; i < kEngineCount; ++i) {
    const EngineWork &x = a.work.engines[i], &y = b.work.engines[i];
    EngineWork& r = out.work.engines[i];
    if (!sub(x.ops, y.ops, r.ops) || !sub(x.bytes_read, y.bytes_read, r.bytes_read) ||
        !sub(x.bytes_written, y.bytes_written, r.bytes_written)) {
      return false;
    }
  }
  if (!sub(a.tensor_tile_ops, b.tensor_tile_ops, out.tensor_tile_ops)) return false;
  if (!sub(a.weight_bytes_read, b.weight_bytes_read, out.weight_bytes_read)) return false;
  if (b.collective_bytes > a.collective_bytes) return false;
  out.collective_bytes = a.collective_bytes - b.collective_bytes;
  return true;
}

bool empty(const TracedOp& op) {
  for (const EngineWork& e : op.work.engines) {
    if (e.ops || e.bytes_read || e.bytes_written) return false;
  }
  return op.collective_bytes == 0;
}

struct Tally {
  const TracedOp* op = nullptr;
  double a = 0, b = 0;  // how many times each trace runs it
};

[[noreturn]] void not_alike(const TracedOp& op, const char* why) {
  throw Error(ErrorCode::kInvalidArgument,
              "the model's layers are not alike (" + op.op + " in the " + op.phase + " " + why +
                  "): trace every layer");
}

}  // namespace

LayerSplit split_layers(const std::vector<TracedOp>& short_trace,
                        const std::vector<TracedOp>& long_trace) {
  std::map<std::string, Tally> tally;
  for (const TracedOp& op : short_trace) {
    Tally& t = tally[key_of(op)];
    t.op = &op;
    t.a += op.count;
  }
  for (const TracedOp& op : long_trace) {
    Tally& t = tally[key_of(op)];
    if (t.op == nullptr) t.op = &op;
    t.b += op.count;
  }
  LayerSplit out;
  // Ops whose count fell (left only the short trace) and ops that appear more often than one
  // more period allows: the two sides of an op that grows with the layers.
  std::map<std::string, std::vector<const TracedOp*>> shrunk, grown;
  for (auto& [key, t] : tally) {
    if (t.b < t.a) {
      for (double i = 0; i < t.a - t.b; ++i) shrunk[shape_key(*t.op)].push_back(t.op);
      t.a = t.b;
    }
    if (t.b > 2 * t.a) {
      for (double i = 0; i < t.b - 2 * t.a; ++i) grown[shape_key(*t.op)].push_back(t.op);
      t.b = 2 * t.a;
    }
    const double period = t.b - t.a, outside = 2 * t.a - t.b;
    if (period > 0) {
      out.period.push_back(*t.op);
      out.period.back().count = period;
    }
    if (outside > 0) {
      out.outside.push_back(*t.op);
      out.outside.back().count = outside;
    }
  }
  for (auto& [shape, olds] : shrunk) {
    auto& news = grown[shape];
    if (news.size() != olds.size()) not_alike(*olds.front(), "trace changes its count");
    for (size_t i = 0; i < olds.size(); ++i) {
      // short = outside + one period; long = outside + two: the growth is one period's share.
      TracedOp delta, base;
      if (!subtract(*news[i], *olds[i], delta) || !subtract(*olds[i], delta, base)) {
        not_alike(*olds[i], "trace changes its work by more than one period's share");
      }
      delta.count = base.count = 1;
      out.period.push_back(delta);
      if (!empty(base)) out.outside.push_back(base);
    }
    news.clear();
  }
  for (const auto& [shape, news] : grown) {
    if (!news.empty()) not_alike(*news.front(), "longer trace has ops of a kind the shorter lacks");
  }
  return out;
}

std::vector<TracedOp> combine(const std::vector<TracePart>& parts) {
  std::vector<TracedOp> out;
  for (const TracePart& part : parts) {
    if (part.ops == nullptr || part.count <= 0) continue;
    for (const TracedOp& op : *part.ops) {
      out.push_back(op);
      out.back().count *= part.count;
      out.back().in_layer = part.in_layer;
    }
  }
  return out;
}

}  // namespace nrtsim::cost
