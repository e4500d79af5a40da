#include "runtime/nki/Timeline.h"

#include <algorithm>
#include <map>

namespace nrtsim::nki {
namespace {

bool narrow(const Program& p, const View& v) {
  return !v.valid() || dtype_size(p.buffers[static_cast<size_t>(v.buffer)].dtype) <= 2;
}

DType dtype_of(const Program& p, const View& v) {
  return p.buffers[static_cast<size_t>(v.buffer)].dtype;
}

// Streamed tensor inputs of an instruction: [P,1] operands broadcast along the free dims (stride
// 0) ride along with the data and are not a second stream.
int streamed_inputs(const Instruction& in) {
  int n = 0;
  for (const View* v : {&in.a, &in.b, &in.c}) {
    if (!v->valid()) continue;
    bool broadcast = v->ndim > 1;
    for (int d = 1; d < v->ndim; ++d) broadcast = broadcast && (v->stride[d] == 0 || v->shape[d] == 1);
    if (!broadcast || v == &in.a) ++n;
  }
  return std::max(n, 1);
}

struct Access {
  int64_t lo, hi;
  double ready_ns;  // when the accessing instruction ends
  bool write;
};

}  // namespace

double instruction_ns(const Program& p, const Instruction& in, const CoreSpec& spec) {
  switch (in.engine) {
    case Engine::kTensor: {
      double cycles;
      const DType dt = in.a.valid() ? dtype_of(p, in.a) : DType::kFloat32;
      if (in.op == Opcode::kTranspose) {
        cycles = std::max<double>(static_cast<double>(in.a.shape[0]), kMatmulMinCycles);
      } else {
        cycles = std::max<double>(static_cast<double>(in.b.free_size()), kMatmulMinCycles);
      }
      if (dt == DType::kFloat32 || (in.b.valid() && dtype_of(p, in.b) == DType::kFloat32)) {
        cycles *= spec.tensor_fp32_slowdown;
      }
      return cycles / spec.tensor_clock_ghz;
    }
    case Engine::kDma: {
      const View& v = in.dst;
      const double bytes = static_cast<double>(v.numel()) *
                           static_cast<double>(std::max(dtype_size(dtype_of(p, v)),
                                                        in.a.valid() ? dtype_size(dtype_of(p, in.a))
                                                                     : size_t{1}));
      return bytes / spec.hbm_gbytes_per_s;  // GB/s = bytes per ns
    }
    default: break;
  }
  const bool sixteen = narrow(p, in.dst) && narrow(p, in.a) && narrow(p, in.b) && narrow(p, in.c);
  double per_cycle = 0, clock = 1;
  switch (in.engine) {
    case Engine::kVector:
      per_cycle = sixteen ? spec.vector_elements_per_cycle_16bit : spec.vector_elements_per_cycle;
      clock = spec.vector_clock_ghz;
      break;
    case Engine::kScalar:
      per_cycle = sixteen ? spec.scalar_elements_per_cycle_16bit : spec.scalar_elements_per_cycle;
      clock = spec.scalar_clock_ghz;
      break;
    default:
      per_cycle = spec.gpsimd_elements_per_cycle;
      clock = spec.gpsimd_clock_ghz;
      break;
  }
  const View& shape_of = in.a.valid() ? in.a : in.dst;
  const double free = static_cast<double>(shape_of.free_size());
  const double cycles = free * 128.0 / per_cycle * streamed_inputs(in) + kAccessStartCycles;
  return cycles / clock;
}

Timeline schedule(const Program& p, const CoreSpec& spec) {
  Timeline t;
  t.instructions.resize(p.instructions.size());
  std::map<std::pair<int32_t, size_t>, double> engine_free;  // (program, engine) -> ns
  std::vector<std::vector<Access>> accesses(p.buffers.size());
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction& in = p.instructions[i];
    if (in.op == Opcode::kPrint) {
      t.instructions[i] = {0, 0};
      continue;
    }
    const double cost = instruction_ns(p, in, spec);
    double start = engine_free[{in.program, index_of(in.engine)}];
    // Dependencies: reads wait for overlapping writes; writes wait for overlapping reads and writes.
    auto wait_for = [&](const View& v, bool write) {
      if (!v.valid() || v.numel() == 0) return;
      const int64_t lo = v.lowest(), hi = v.end();
      for (const Access& a : accesses[static_cast<size_t>(v.buffer)]) {
        if ((write || a.write) && a.lo < hi && lo < a.hi) start = std::max(start, a.ready_ns);
      }
    };
    for (const View* v : {&in.a, &in.b, &in.c}) wait_for(*v, false);
    wait_for(in.dst, true);
    if (in.d.valid()) wait_for(in.d, true);
    if (in.op == Opcode::kMatmul && in.accumulate) wait_for(in.dst, false);

    const double engine_end = start + cost;
    const double ready = in.engine == Engine::kDma ? engine_end + kDmaLatencyNs : engine_end;
    engine_free[{in.program, index_of(in.engine)}] = engine_end;
    t.instructions[i] = {start, ready};
    const size_t e = index_of(in.engine);
    if (t.instruction_count[e] == 0) {
      t.engine_begin_ns[e] = start;
      t.engine_end_ns[e] = ready;
    } else {
      t.engine_begin_ns[e] = std::min(t.engine_begin_ns[e], start);
      t.engine_end_ns[e] = std::max(t.engine_end_ns[e], ready);
    }
    t.busy_ns[e] += cost;
    t.instruction_count[e] += 1;
    t.makespan_ns = std::max(t.makespan_ns, ready);
    if (in.op == Opcode::kMatmul) {
      t.matmul_flops += 2ull * static_cast<uint64_t>(in.a.shape[0]) *
                        static_cast<uint64_t>(in.a.free_size()) *
                        static_cast<uint64_t>(in.b.free_size());
    }
    if (in.engine == Engine::kDma) {
      t.dma_bytes += static_cast<uint64_t>(in.dst.numel()) * dtype_size(dtype_of(p, in.dst));
    }

    auto record = [&](const View& v, bool write) {
      if (!v.valid() || v.numel() == 0) return;
      auto& list = accesses[static_cast<size_t>(v.buffer)];
      const int64_t lo = v.lowest(), hi = v.end();
      if (write) {
        // A write that covers earlier accesses ends after them: later conflicts with those are
        // conflicts with it, so they can go (keeps the lists short in long unrolled loops).
        list.erase(std::remove_if(list.begin(), list.end(),
                                  [&](const Access& a) { return a.lo >= lo && a.hi <= hi; }),
                   list.end());
      }
      list.push_back({lo, hi, ready, write});
    };
    for (const View* v : {&in.a, &in.b, &in.c}) record(*v, false);
    record(in.dst, true);
    if (in.d.valid()) record(in.d, true);
  }
  return t;
}

}  // namespace nrtsim::nki
