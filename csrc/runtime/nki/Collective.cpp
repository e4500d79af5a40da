#include "runtime/nki/Collective.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <sstream>

#include "runtime/Error.h"
#include "runtime/LinkModel.h"
#include "runtime/nki/Alu.h"
#include "runtime/nki/Numerics.h"
#include "runtime/transport/Verb.h"

namespace nrtsim::nki {
namespace {

DType dtype_of(const Program& p, const View& v) {
  return v.dtype >= 0 ? static_cast<DType>(v.dtype)
                      : p.buffers[static_cast<size_t>(v.buffer)].dtype;
}

// Calls f(element offset) for every element of `v`, in row-major order of its dims.
template <class F>
void for_each_element(const View& v, F&& f) {
  const int64_t n = v.numel();
  if (n == 0) return;
  std::array<int64_t, kMaxDims> idx{};
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = v.offset;
    for (int d = 0; d < v.ndim; ++d) {
      off += idx[static_cast<size_t>(d)] * v.stride[static_cast<size_t>(d)];
    }
    f(off);
    for (int d = v.ndim - 1; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < v.shape[static_cast<size_t>(d)]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
}

// The view's elements as they are stored: the bits travel unchanged.
StagedTile stage(const Program& p, const View& v, const std::vector<uint8_t*>& base) {
  StagedTile t;
  t.dtype = dtype_of(p, v);
  t.shape.assign(v.shape.begin(), v.shape.begin() + v.ndim);
  const size_t size = dtype_size(t.dtype);
  t.bytes.resize(static_cast<size_t>(v.numel()) * size);
  const uint8_t* src = base[static_cast<size_t>(v.buffer)];
  uint8_t* out = t.bytes.data();
  for_each_element(v, [&](int64_t off) {
    std::memcpy(out, src + off * static_cast<int64_t>(size), size);
    out += size;
  });
  return t;
}

void unstage(const StagedTile& t, const View& v, const std::vector<uint8_t*>& base) {
  const size_t size = dtype_size(t.dtype);
  uint8_t* dst = base[static_cast<size_t>(v.buffer)];
  const uint8_t* in = t.bytes.data();
  for_each_element(v, [&](int64_t off) {
    std::memcpy(dst + off * static_cast<int64_t>(size), in, size);
    in += size;
  });
}

[[noreturn]] void fail(const Program& p, size_t index, const std::string& what) {
  const Instruction& in = p.instructions[index];
  std::ostringstream os;
  os << "NKI kernel '" << p.name << "', instruction " << index << " (collective "
     << collective_kind_name(static_cast<CollectiveKind>(in.axes)) << ", line " << in.line
     << "): " << what;
  throw Error(ErrorCode::kInvalidArgument, os.str());
}

uint64_t bytes_of(const Program& p, const View& v) {
  return v.valid() ? static_cast<uint64_t>(v.numel()) * dtype_size(dtype_of(p, v)) : 0;
}

// What one part of a call moves for this rank, by the transport's verb table.
transport::LinkBytes part_bytes(const Program& p, const Instruction& in, int ranks) {
  namespace tp = transport;
  tp::GroupPlace place;
  place.rank = 0;
  place.size = ranks;
  // The group's ranks on this rank's host; the others on further hosts in blocks as large.
  const int here = static_cast<int>(in.imm2);
  if (here >= 1 && here < ranks) {
    for (int r = 0; r < ranks; ++r) place.host_of.push_back(r / here);
  }
  tp::VerbCall call;
  switch (static_cast<CollectiveKind>(in.axes)) {
    case CollectiveKind::kAllReduce:
      call.verb = tp::Verb::kAllreduce;
      call.bytes = bytes_of(p, in.a);
      return tp::link_bytes(call, place);
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllGatherV:
      // all_gather_v's chunk is known only when it runs: priced at its source's capacity.
      call.verb = tp::Verb::kAllgather;
      call.bytes = bytes_of(p, in.a);  // one rank's part
      return tp::link_bytes(call, place);
    case CollectiveKind::kReduceScatter:
      call.verb = tp::Verb::kReduceScatter;
      call.bytes = bytes_of(p, in.dst);  // one rank's part
      return tp::link_bytes(call, place);
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kAllToAllV: {
      // all_to_all_v's counts are known only when it runs: priced at its source's capacity
      // spread evenly over the group (what it moves at most).
      call.verb = tp::Verb::kAlltoall;
      const uint64_t send = bytes_of(p, in.a) / static_cast<uint64_t>(ranks);
      const uint64_t recv = bytes_of(p, in.dst) / static_cast<uint64_t>(ranks);
      call.send_to.assign(static_cast<size_t>(ranks), send);
      call.recv_from.assign(static_cast<size_t>(ranks), recv);
      return tp::link_bytes(call, place);
    }
    case CollectiveKind::kPermute:
    case CollectiveKind::kPermuteImplicit:
    case CollectiveKind::kPermuteImplicitReduce: {
      // One tile to a peer and one from a peer, at once (full duplex): imm0 is 2 or 3 (this
      // rank, its target, its source); across hosts when a peer is on another host.
      call.verb = tp::Verb::kSend;
      call.root = ranks - 1;
      call.bytes = bytes_of(p, in.dst);
      tp::LinkBytes b = tp::link_bytes(call, place);
      b.received = b.sent;
      return b;
    }
  }
  return {};
}

}  // namespace

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kAllToAllV: return "all_to_all_v";
    case CollectiveKind::kPermute: return "collective_permute";
    case CollectiveKind::kPermuteImplicit: return "collective_permute_implicit";
    case CollectiveKind::kPermuteImplicitReduce: return "collective_permute_implicit_reduce";
    case CollectiveKind::kAllGatherV: return "all_gather_v";
  }
  return "collective";
}

void run_collective(const Program& p, size_t index, const std::vector<uint8_t*>& base,
                    const CollectiveHook* hook) {
  const Instruction& in = p.instructions[index];
  if (in.axes > static_cast<uint32_t>(CollectiveKind::kAllGatherV)) {
    fail(p, index, "unknown collective kind " + std::to_string(in.axes));
  }
  if (hook == nullptr || !*hook) {
    fail(p, index,
         "this run has no exchange with other ranks (a host that runs kernels with "
         "nki.collectives provides one: the nki package over torch.distributed)");
  }
  CollectiveExchange x;
  x.instruction = &in;
  x.kind = static_cast<CollectiveKind>(in.axes);
  if (x.kind == CollectiveKind::kPermuteImplicitReduce) {
    // The DMA engines reduce the two sources in FP32 and send the result in the destination's
    // format.
    if (!in.c.valid() || in.c.numel() != in.a.numel() || in.dst.numel() != in.a.numel()) {
      fail(p, index, "the two sources and the destination must hold the same number of elements");
    }
    const StagedTile s0 = stage(p, in.a, base), s1 = stage(p, in.c, base);
    const auto n = static_cast<size_t>(in.a.numel());
    std::vector<float> x0(n), x1(n);
    load_run(s0.dtype, s0.bytes.data(), 1, static_cast<int64_t>(n), x0.data());
    load_run(s1.dtype, s1.bytes.data(), 1, static_cast<int64_t>(n), x1.data());
    for (size_t e = 0; e < n; ++e) x0[e] = apply_alu(in.alu0, x0[e], x1[e]);
    x.send.dtype = dtype_of(p, in.dst);
    x.send.shape = s0.shape;
    x.send.bytes.resize(n * dtype_size(x.send.dtype));
    store_run(x.send.dtype, x.send.bytes.data(), 1, static_cast<int64_t>(n), x0.data());
  } else {
    x.send = stage(p, in.a, base);
  }
  x.receive = stage(p, in.dst, base);
  if (in.d.valid()) x.metadata = stage(p, in.d, base);
  const size_t receive_bytes = x.receive.bytes.size(), metadata_bytes = x.metadata.bytes.size();
  (*hook)(x);
  if (x.receive.bytes.size() != receive_bytes || x.metadata.bytes.size() != metadata_bytes) {
    fail(p, index, "the exchange changed the size of its result");
  }
  unstage(x.receive, in.dst, base);
  if (in.d.valid()) unstage(x.metadata, in.d, base);
}

double collective_call_ns(const Program& p, size_t index, const CoreLinks* links) {
  const Instruction& first = p.instructions[index];
  const int ranks = std::max(1, static_cast<int>(first.imm0));
  if (ranks == 1) return 0;
  transport::LinkBytes call;
  for (size_t i = index; i < p.instructions.size(); ++i) {
    const Instruction& in = p.instructions[i];
    if (in.op != Opcode::kCollective || in.imm1 != first.imm1) break;
    // A coalesced call moves its tensors as one buffer (as the process group's coalesced calls).
    const transport::LinkBytes b = part_bytes(p, in, ranks);
    call.sent += b.sent;
    call.received += b.received;
    call.efa += b.efa;
    call.buffer += b.buffer;
    call.passes = std::max(call.passes, b.passes);
    call.algorithm = b.algorithm;
    call.ranks = b.ranks;
    call.hosts = b.hosts;
    call.point_to_point = b.point_to_point;
    call.all_to_all = b.all_to_all;
  }
  if (links == nullptr || !links->known()) {
    throw Error(ErrorCode::kConfiguration,
                "NKI kernel '" + p.name + "': timing its " +
                    collective_kind_name(static_cast<CollectiveKind>(first.axes)) +
                    " needs the runtime's link model (import torch_neuronx, whose neuron "
                    "devices carry it)");
  }
  return links->collective_ns(transport::collective_traffic(call));
}

}  // namespace nrtsim::nki
