#include "runtime/LaunchTotals.h"

namespace nrtsim {

void LaunchTotals::on_launch(const LaunchRecord& record) {
  std::lock_guard<SpinLock> lock(mutex_);
  auto [it, inserted] = index_.try_emplace(record.op, rows_.size());
  if (inserted) {
    // A name that was not interned may share its text with an interned one: share the row.
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (rows_[i].op == record.op) {
        it->second = i;
        inserted = false;
        break;
      }
    }
    if (inserted) rows_.push_back(OpTotals{record.op, record.kind});
  }
  OpTotals& row = rows_[it->second];
  row.kind = record.kind;
  row.engine = record.work.main_engine();
  row.launches += 1;
  for (size_t e = 0; e < kEngineCount; ++e) {
    row.ops[e] += record.work.engines[e].ops;
    row.engine_bytes_read[e] += record.work.engines[e].bytes_read;
    row.engine_bytes_written[e] += record.work.engines[e].bytes_written;
  }
  row.bytes_read += record.work.bytes_read();
  row.bytes_written += record.work.bytes_written();
  row.host_ns += record.host_end_ns - record.host_begin_ns;
  row.sim_ns += record.sim_duration_ns();
}

std::vector<OpTotals> LaunchTotals::snapshot() const {
  std::lock_guard<SpinLock> lock(mutex_);
  return rows_;
}

uint64_t LaunchTotals::total_launches() const {
  std::lock_guard<SpinLock> lock(mutex_);
  uint64_t total = 0;
  for (const auto& row : rows_) total += row.launches;
  return total;
}

void LaunchTotals::clear() {
  std::lock_guard<SpinLock> lock(mutex_);
  index_.clear();
  rows_.clear();
}

}  // namespace nrtsim
