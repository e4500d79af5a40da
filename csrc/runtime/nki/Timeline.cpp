#include "runtime/nki/Timeline.h"

#include "runtime/Error.h"

#include <algorithm>
#include <map>
#include <vector>

#include "runtime/nki/Collective.h"
#include "runtime/nki/DmaModel.h"

namespace nrtsim::nki {
namespace {

DType dtype_of(const Program& p, const View& v) {
  return v.dtype >= 0 ? static_cast<DType>(v.dtype) : p.buffers[static_cast<size_t>(v.buffer)].dtype;
}

bool narrow(const Program& p, const View& v) { return !v.valid() || dtype_size(dtype_of(p, v)) <= 2; }

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

// Whether collective instruction i continues the call of the one before it (a coalesced call).
bool same_call(const Program& p, size_t i) {
  return i > 0 && p.instructions[i - 1].op == Opcode::kCollective &&
         p.instructions[i - 1].imm1 == p.instructions[i].imm1;
}

// nki.collectives (Collective.h): a call keeps every DMA queue of its core busy for its time on
// the links (the collective DMA rings drive them); its first part carries the whole call.
std::vector<double> collective_shares(const Program& p, size_t i, const CoreLinks* links,
                                      const DmaSpec& dma) {
  if (same_call(p, i)) return {};
  const double ns = collective_call_ns(p, i, links);
  if (ns <= 0) return {};
  return std::vector<double>(static_cast<size_t>(dma.engines), ns);
}

// The PE array of one program's Tensor engine in 32 x 32 cells (row-major, 4 x 4): when each
// is free, when the last instruction was issued, and how far busy time is counted.
struct TensorArray {
  std::array<double, 16> cell_free_ns{};
  double issued_ns = 0;
  double covered_ns = 0;
  // When an instruction using `cells` may start: in program order, once those cells are free.
  double ready_ns(uint16_t cells) const {
    double at = issued_ns;
    for (size_t c = 0; c < cell_free_ns.size(); ++c) {
      if ((cells >> c) & 1u) at = std::max(at, cell_free_ns[c]);
    }
    return at;
  }
};

// The cells a Tensor engine instruction uses: a tiled matmul's rows x columns (AWS's nc_matmul
// "Tiling mode": pattern {start_row, row_size, start_column, column_size}, rows the contraction
// partitions, columns the stationary's free size), everything else the whole array.
uint16_t pe_cells(const Instruction& in) {
  const bool tiled = (in.op == Opcode::kMatmul || in.op == Opcode::kMatmulMx) && in.pattern[1] > 0 &&
                     in.pattern[3] > 0;
  if (!tiled) return 0xFFFFu;
  uint16_t mask = 0;
  for (int64_t r = in.pattern[0] / 32; r < (in.pattern[0] + in.pattern[1]) / 32 && r < 4; ++r) {
    for (int64_t c = in.pattern[2] / 32; c < (in.pattern[2] + in.pattern[3]) / 32 && c < 4; ++c) {
      mask = static_cast<uint16_t>(mask | (1u << (r * 4 + c)));
    }
  }
  return mask ? mask : 0xFFFFu;
}

}  // namespace

std::vector<double> dma_engine_times(const Program& p, const Instruction& in, const DmaSpec& dma) {
  const DmaShape shape = dma_shape(p, in, dma);
  if (shape.descriptors == 0) return {};
  double rate = dma.engine_bytes_per_ns;
  if (shape.transpose) {
    rate *= shape.element_bytes <= 2 ? dma.transpose_efficiency_2byte
                                     : dma.transpose_efficiency_4byte;
  }
  const int64_t engines = std::min<int64_t>(dma.engines, shape.descriptors);
  const double per_descriptor = dma.descriptor_ns + shape.descriptor_bytes / rate;
  std::vector<double> out(static_cast<size_t>(engines));
  for (int64_t e = 0; e < engines; ++e) {
    const int64_t n = shape.descriptors / engines + (e < shape.descriptors % engines ? 1 : 0);
    out[static_cast<size_t>(e)] = dma.transfer_fixed_ns + static_cast<double>(n) * per_descriptor;
  }
  return out;
}

double instruction_ns(const Program& p, const Instruction& in, const CoreSpec& spec) {
  switch (in.engine) {
    case Engine::kTensor: {
      double cycles;
      const DType dt = in.a.valid() ? dtype_of(p, in.a) : DType::kFloat32;
      if (in.op == Opcode::kTranspose) {
        cycles = std::max<double>(static_cast<double>(in.a.shape[0]), kMatmulMinCycles);
      } else {
        // An MX matmul streams its moving x4 elements at the BF16 rate: 4x the MACs per cycle;
        // a double-row FP8 matmul streams its two rows of N at once (AWS's Trainium2 guide:
        // the same time as a BF16 matmul of contraction 128).
        const double pair = in.op == Opcode::kMatmul && (in.axes & 1u) != 0 ? 2.0 : 1.0;
        cycles = std::max<double>(static_cast<double>(in.b.free_size()) / pair, kMatmulMinCycles);
      }
      if (dt == DType::kFloat32 || (in.b.valid() && dtype_of(p, in.b) == DType::kFloat32)) {
        cycles *= spec.tensor_fp32_slowdown;
      }
      return cycles / spec.tensor_clock_ghz;
    }
    case Engine::kDma: {
      // The busiest engine's occupation (DmaModel.h), the transfer spread over all engines.
      const DmaSpec& dma = dma_spec(spec.neuroncore);
      const std::vector<double> groups = dma_engine_times(p, in, dma);
      return groups.empty() ? 0.0 : *std::max_element(groups.begin(), groups.end());
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
  // A gather's work is the elements it writes (its source is only addressed), one stream.
  const bool gather = in.op == Opcode::kLocalGather || in.op == Opcode::kNGather;
  if (in.op == Opcode::kTopk) {
    // AWS's estimate: 4 n + K GpSimd cycles (n values in a group's snake, K results); the
    // eight GpSimd cores take the groups of 16 partitions in parallel.
    const double cycles = 4.0 * in.imm0 + static_cast<double>(in.dst.free_size()) + kAccessStartCycles;
    return cycles / clock;
  }
  const View& shape_of = in.a.valid() && !gather ? in.a : in.dst;
  const double free = static_cast<double>(shape_of.free_size());
  double cycles =
      free * 128.0 / per_cycle * (gather ? 1 : streamed_inputs(in)) + kAccessStartCycles;
  if (!in.offsets.empty()) cycles = std::max(cycles, kDynamicOffsetMinCycles);
  return cycles / clock;
}

namespace {

// The length of the union of [start, end) intervals (sorted in place).
double union_length(std::vector<std::pair<double, double>>& intervals) {
  std::sort(intervals.begin(), intervals.end());
  double covered = 0, lo = 0, hi = -1;
  for (const auto& [a, b] : intervals) {
    if (a > hi) {
      if (hi > lo) covered += hi - lo;
      lo = a;
      hi = b;
    } else {
      hi = std::max(hi, b);
    }
  }
  if (hi > lo) covered += hi - lo;
  return covered;
}

}  // namespace

Timeline schedule(const Program& p, const CoreSpec& spec, const CoreLinks* links) {
  Timeline t;
  t.instructions.resize(p.instructions.size());
  std::map<std::pair<int32_t, size_t>, double> engine_free;  // (program, engine) -> ns
  const DmaSpec& dma = dma_spec(spec.neuroncore);
  std::map<int32_t, std::vector<double>> queue_free;  // program -> per DMA engine, when free
  std::map<int32_t, TensorArray> tensor_arrays;       // program -> its PE array
  std::vector<std::pair<double, double>> dma_active;  // intervals some DMA engine is busy
  std::vector<std::vector<Access>> accesses(p.buffers.size());
  double floor_ns = 0;  // nothing after a loop boundary or a full barrier starts earlier
  const LoopNest nest = match_loops(p);
  t.loops.resize(nest.begins.size());
  std::vector<std::vector<std::pair<double, double>>> loop_dma(nest.begins.size());
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction& in = p.instructions[i];
    if (in.op == Opcode::kPrint) {
      t.instructions[i] = {0, 0};
      continue;
    }
    if (in.op == Opcode::kLoopBegin || in.op == Opcode::kLoopEnd) {
      // A loop boundary: the sequencers test and branch once everything before is done, and
      // nothing after starts earlier (iterations do not overlap). The branch itself is not
      // charged: its cost is not published.
      const double at = std::max(t.makespan_ns, floor_ns);
      t.instructions[i] = {at, at};
      floor_ns = at;
      if (in.op == Opcode::kLoopBegin) t.loops[static_cast<size_t>(nest.loop_at(i))].begin_ns = at;
      continue;
    }
    if (in.op == Opcode::kBarrier) {
      // A cross-core synchronisation: each core writes a semaphore to the other and waits for
      // theirs. The cores' barrier instructions of one synchronisation come one after another,
      // one per core (a core's second barrier in a row starts the next one): they share one
      // release, one semaphore write across the pair (a DMA engine's write latency) after the
      // last core arrives.
      size_t last = i + 1;
      std::vector<int32_t> cores{in.program};
      while (last < p.instructions.size() && p.instructions[last].op == Opcode::kBarrier &&
             std::find(cores.begin(), cores.end(), p.instructions[last].program) == cores.end()) {
        cores.push_back(p.instructions[last].program);
        ++last;
      }
      // axes bit 0 (nisa.core_barrier): AWS's page, "The barrier will block execution on this
      // engine, other engines will not be blocked". A core arrives once its engine's earlier
      // work and every earlier access to `data` (operand a) are done; after the release, that
      // engine and whatever touches `data` wait for it, the core's other engines do not.
      // Otherwise (sendrecv's synchronisation): a core arrives when everything before is done,
      // and nothing after starts before the release.
      auto arrival = [&](const Instruction& b) {
        if ((b.axes & 1u) == 0) return std::max(t.makespan_ns, floor_ns);
        double at = floor_ns;
        if (b.engine == Engine::kTensor) {
          at = std::max(at, tensor_arrays[b.program].ready_ns(0xFFFFu));
        } else {
          at = std::max(at, engine_free[{b.program, index_of(b.engine)}]);
        }
        if (b.a.valid()) {
          for (const Access& a : accesses[static_cast<size_t>(b.a.buffer)]) {
            if (a.lo < b.a.end() && b.a.lowest() < a.hi) at = std::max(at, a.ready_ns);
          }
        }
        return at;
      };
      double release = 0;
      for (size_t j = i; j < last; ++j) {
        const double at = arrival(p.instructions[j]);
        t.instructions[j].start_ns = at;
        release = std::max(release, at);
      }
      release += dma.latency_ns;
      for (size_t j = i; j < last; ++j) {
        const Instruction& b = p.instructions[j];
        t.instructions[j].end_ns = release;
        if ((b.axes & 1u) == 0) {
          floor_ns = release;
        } else if (b.engine == Engine::kTensor) {
          TensorArray& pe = tensor_arrays[b.program];
          pe.issued_ns = std::max(pe.issued_ns, release);
        } else {
          engine_free[{b.program, index_of(b.engine)}] = release;
        }
        if ((b.axes & 1u) != 0 && b.a.valid()) {
          // Later readers and writers of `data`, on any engine, wait for the release.
          accesses[static_cast<size_t>(b.a.buffer)].push_back(
              {b.a.lowest(), b.a.end(), release, true});
        }
      }
      t.makespan_ns = std::max(t.makespan_ns, release);
      i = last - 1;
      continue;
    }
    if (in.op == Opcode::kTensorIndirect) {
      // Staging for the compute instruction beside it, not an instruction of its own: it takes
      // no time and no engine; it orders the data, index and staged columns (see below).
      double at = floor_ns;
      for (const View* v : {&in.a, &in.b, &in.dst}) {
        if (!v->valid()) continue;
        const bool write = v == &in.dst;
        for (const Access& a : accesses[static_cast<size_t>(v->buffer)]) {
          if ((write || a.write) && a.lo < v->end() && v->lowest() < a.hi) {
            at = std::max(at, a.ready_ns);
          }
        }
      }
      if (i > 0 && (in.axes & 1u) != 0) at = std::max(at, t.instructions[i - 1].end_ns);
      t.instructions[i] = {at, at};
      for (const View* v : {&in.a, &in.b, &in.dst}) {
        if (v->valid() && v->numel() > 0) {
          accesses[static_cast<size_t>(v->buffer)].push_back(
              {v->lowest(), v->end(), at, v == &in.dst});
        }
      }
      continue;
    }
    const bool is_dma = in.engine == Engine::kDma;
    const bool is_tensor = in.engine == Engine::kTensor;
    const double cost = is_dma ? 0.0 : instruction_ns(p, in, spec);
    double start = std::max(floor_ns, is_dma || is_tensor ? 0.0 : engine_free[{in.program, index_of(in.engine)}]);
    // The Tensor engine issues in program order; an instruction starts once the PE cells it
    // uses are free (the whole array unless a tiled matmul names its part).
    const uint16_t cells = is_tensor ? pe_cells(in) : 0;
    if (is_tensor) start = std::max(start, tensor_arrays[in.program].ready_ns(cells));
    // The elements an operand may touch: for one placed at run time, every place it may take.
    auto reach = [&](const View& v, int64_t& lo, int64_t& hi) {
      lo = v.lowest();
      hi = v.end();
      for (int32_t k = 0; k < 7 && !in.offsets.empty(); ++k) {
        if (&operand_view(in, k) == &v) operand_reach(in, k, v, lo, hi);
      }
    };
    // Dependencies: reads wait for overlapping writes; writes wait for overlapping reads and writes.
    auto wait_for = [&](const View& v, bool write) {
      if (!v.valid() || v.numel() == 0) return;
      int64_t lo, hi;
      reach(v, lo, hi);
      for (const Access& a : accesses[static_cast<size_t>(v.buffer)]) {
        if ((write || a.write) && a.lo < hi && lo < a.hi) start = std::max(start, a.ready_ns);
      }
    };
    for (const View* v : {&in.a, &in.b, &in.c, &in.f}) wait_for(*v, false);
    for (const RuntimeOffset& r : in.offsets) wait_for(r.index, false);
    wait_for(in.dst, true);
    if (in.d.valid()) wait_for(in.d, true);
    if (in.e.valid()) wait_for(in.e, true);
    for (int32_t j : in.after) {
      if (j >= 0 && static_cast<size_t>(j) < i) start = std::max(start, t.instructions[j].end_ns);
    }
    if (in.op == Opcode::kMatmul && in.accumulate) wait_for(in.dst, false);

    double engine_end = start + cost;
    double busy = cost;
    const bool collective = in.op == Opcode::kCollective;
    if (is_dma) {
      // Each engine's share goes to the DMA engine that frees up first; the transfer is done
      // when its last share is, and usable latency_ns later.
      auto& queues = queue_free[in.program];
      if (queues.empty()) queues.assign(static_cast<size_t>(dma.engines), 0.0);
      std::vector<double> shares = collective ? collective_shares(p, i, links, dma)
                                              : dma_engine_times(p, in, dma);
      std::sort(shares.rbegin(), shares.rend());
      double first = -1;
      busy = 0;
      for (double share : shares) {
        auto q = std::min_element(queues.begin(), queues.end());
        const double s0 = std::max(*q, start);
        *q = s0 + share;
        first = first < 0 ? s0 : std::min(first, s0);
        engine_end = std::max(engine_end, *q);
        dma_active.emplace_back(s0, *q);
        busy = std::max(busy, share);
      }
      if (!collective) {
        t.dma_descriptors += static_cast<uint64_t>(dma_shape(p, in, dma).descriptors);
      }
      if (first >= 0) start = first;
    }
    // A collective's link time includes its hops' latency; a coalesced call's parts end with it.
    double ready = is_dma && !collective ? engine_end + dma.latency_ns : engine_end;
    if (collective && same_call(p, i)) ready = std::max(ready, t.instructions[i - 1].end_ns);
    if (!is_dma) engine_free[{in.program, index_of(in.engine)}] = engine_end;
    if (is_tensor) {
      // Busy while any cell is: with in-order issue, the part of [start, end) past what the
      // engine's earlier instructions already cover.
      TensorArray& pe = tensor_arrays[in.program];
      busy = start >= pe.covered_ns ? cost : std::max(0.0, engine_end - pe.covered_ns);
      pe.covered_ns = std::max(pe.covered_ns, engine_end);
      pe.issued_ns = start;
      for (size_t c = 0; c < pe.cell_free_ns.size(); ++c) {
        if ((cells >> c) & 1u) pe.cell_free_ns[c] = engine_end;
      }
    }
    t.instructions[i] = {start, ready};
    const size_t e = index_of(in.engine);
    if (t.instruction_count[e] == 0) {
      t.engine_begin_ns[e] = start;
      t.engine_end_ns[e] = ready;
    } else {
      t.engine_begin_ns[e] = std::min(t.engine_begin_ns[e], start);
      t.engine_end_ns[e] = std::max(t.engine_end_ns[e], ready);
    }
    if (!is_dma) t.busy_ns[e] += busy;
    t.instruction_count[e] += 1;
    t.makespan_ns = std::max(t.makespan_ns, ready);
    const uint64_t flops0 = t.matmul_flops, bytes0 = t.dma_bytes;
    if (in.op == Opcode::kMatmul || in.op == Opcode::kMatmulMx) {
      // A double-row matmul: K x 2 rows of M and of N, counted as the two halves they are.
      const uint64_t pair = in.op == Opcode::kMatmul && (in.axes & 1u) != 0 ? 2ull : 1ull;
      t.matmul_flops += (in.op == Opcode::kMatmulMx ? 8ull : 2ull) * static_cast<uint64_t>(in.a.shape[0]) *
                        static_cast<uint64_t>(in.a.free_size()) *
                        static_cast<uint64_t>(in.b.free_size()) / pair;
    }
    if (in.engine == Engine::kDma) {
      // What moves: the destination, or for a scatter the tile it scatters (its destination
      // view spans every row an index may name).
      const bool scatter_rows = in.op == Opcode::kDmaIndirect && (in.axes & 1u) != 0;
      const View& moved = scatter_rows ? in.a : in.dst;
      t.dma_bytes += static_cast<uint64_t>(moved.numel()) * dtype_size(dtype_of(p, moved));
    }
    if (!nest.empty() && nest.innermost[i] >= 0) {
      const auto k = static_cast<size_t>(nest.innermost[i]);
      LoopCost& own = t.loops[k];
      if (!is_dma) own.busy_ns[e] += busy;
      own.instruction_count[e] += 1;
      own.matmul_flops += static_cast<double>(t.matmul_flops - flops0);
      own.dma_bytes += static_cast<double>(t.dma_bytes - bytes0);
      if (is_dma) {
        own.dma_descriptors += static_cast<double>(dma_shape(p, in, dma).descriptors);
        loop_dma[k].emplace_back(start, engine_end);
      }
    }

    auto record = [&](const View& v, bool write) {
      if (!v.valid() || v.numel() == 0) return;
      auto& list = accesses[static_cast<size_t>(v.buffer)];
      int64_t lo, hi;
      reach(v, lo, hi);
      if (write) {
        // A write that covers earlier accesses ends after them: later conflicts with those are
        // conflicts with it, so they can go (keeps the lists short in long unrolled loops).
        list.erase(std::remove_if(list.begin(), list.end(),
                                  [&](const Access& a) { return a.lo >= lo && a.hi <= hi; }),
                   list.end());
      }
      list.push_back({lo, hi, ready, write});
    };
    for (const View* v : {&in.a, &in.b, &in.c, &in.f}) record(*v, false);
    for (const RuntimeOffset& r : in.offsets) record(r.index, false);
    // A gather staged for this instruction reads its data and index while this one runs.
    for (size_t j = i; j > 0 && p.instructions[j - 1].op == Opcode::kTensorIndirect &&
                       (p.instructions[j - 1].axes & 1u) == 0;
         --j) {
      record(p.instructions[j - 1].a, false);
      record(p.instructions[j - 1].b, false);
    }
    record(in.dst, true);
    if (in.d.valid()) record(in.d, true);
    if (in.e.valid()) record(in.e, true);
  }
  // DMA is active while any of its engines is: the union of their busy intervals.
  t.busy_ns[index_of(Engine::kDma)] = union_length(dma_active);
  // Each loop's own span: its traced body's, less its inner loops'; its own DMA busy time: the
  // union of its own transfers' intervals.
  for (size_t k = 0; k < nest.begins.size(); ++k) {
    const auto b = static_cast<size_t>(nest.begins[k]);
    const auto e = static_cast<size_t>(nest.partner[b]);
    const double span = t.instructions[e].start_ns - t.instructions[b].start_ns;
    t.loops[k].span_ns += span;
    if (nest.parent[k] >= 0) t.loops[static_cast<size_t>(nest.parent[k])].span_ns -= span;
    t.loops[k].busy_ns[index_of(Engine::kDma)] = union_length(loop_dma[k]);
  }
  return t;
}

Timeline with_iterations(const Timeline& traced, const std::vector<int64_t>& iterations) {
  Timeline t = traced;
  if (iterations.size() != t.loops.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                "NKI timeline: " + std::to_string(iterations.size()) + " loop counts for " +
                    std::to_string(t.loops.size()) + " device loops");
  }
  double flops = static_cast<double>(t.matmul_flops);
  double bytes = static_cast<double>(t.dma_bytes);
  double descriptors = static_cast<double>(t.dma_descriptors);
  std::array<double, kEngineCount> shift{};
  for (size_t k = 0; k < t.loops.size(); ++k) {
    const LoopCost& own = t.loops[k];
    const double extra = static_cast<double>(iterations[k]) - 1.0;
    t.makespan_ns += extra * own.span_ns;
    for (size_t e = 0; e < kEngineCount; ++e) {
      t.busy_ns[e] = std::max(0.0, t.busy_ns[e] + extra * own.busy_ns[e]);
      const double n = static_cast<double>(t.instruction_count[e]) + extra * own.instruction_count[e];
      t.instruction_count[e] = static_cast<uint64_t>(std::max(0.0, n));
      // An engine whose work ends after the loop starts ends later (or earlier) by as much.
      if (traced.instruction_count[e] > 0 && traced.engine_end_ns[e] > own.begin_ns) {
        shift[e] += extra * own.span_ns;
      }
    }
    flops += extra * own.matmul_flops;
    bytes += extra * own.dma_bytes;
    descriptors += extra * own.dma_descriptors;
  }
  for (size_t e = 0; e < kEngineCount; ++e) {
    t.engine_end_ns[e] = std::max(t.engine_begin_ns[e], t.engine_end_ns[e] + shift[e]);
  }
  t.makespan_ns = std::max(0.0, t.makespan_ns);
  t.matmul_flops = static_cast<uint64_t>(std::max(0.0, flops));
  t.dma_bytes = static_cast<uint64_t>(std::max(0.0, bytes));
  t.dma_descriptors = static_cast<uint64_t>(std::max(0.0, descriptors));
  return t;
}

}  // namespace nrtsim::nki
