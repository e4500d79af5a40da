#include "runtime/cost/Collectives.h"

#include <algorithm>
#include <cmath>

namespace nrtsim::cost {

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Bandwidth and latency terms of the classic algorithms for n members at per-member bandwidth bw
// (bytes/ns): `steps` algorithm steps of latency alpha per reduce-scatter or all-gather pass (an
// all-reduce is one of each).
double ring(CollectiveKind kind, double buffer, int n, double bw, double steps, double alpha) {
  if (n <= 1) return 0.0;
  const double share = static_cast<double>(n - 1) / n;
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2 * share * buffer / bw + 2 * steps * alpha;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: return share * buffer / bw + steps * alpha;
    // Every member sends (n-1)/n of its buffer, one piece to each peer, all at once.
    case CollectiveKind::kAllToAll: return share * buffer / bw + steps * alpha;
    case CollectiveKind::kSend: return buffer / bw + alpha;
  }
  return 0.0;
}

// g GPUs of one NVSwitch domain.
double nvswitch_ns(CollectiveKind kind, double bytes, int g, const LinkSpec& link, double bw,
                   bool inference, std::string& used) {
  const double alpha = link.hop_latency_us * 1e3;
  const double mbytes = bytes / 1e6;
  const double share = static_cast<double>(g - 1) / g;
  if (kind == CollectiveKind::kAllReduce && inference) {
    // A serving engine's custom all-reduce: one-shot reads every peer's whole buffer in one
    // step; two-shot reduce-scatters and all-gathers through peer memory in two.
    if (mbytes < link.one_shot_below_mbytes) {
      used += " (one-shot)";
      return (g - 1) * bytes / bw + alpha;
    }
    if (mbytes < link.two_shot_below_mbytes) {
      used += " (two-shot)";
      return 2 * share * bytes / bw + 2 * alpha;
    }
  }
  if (kind == CollectiveKind::kAllToAll || kind == CollectiveKind::kSend) {
    // Pairs talk directly through the switch, all at once.
    return ring(kind, bytes, g, bw, 1, alpha);
  }
  // NCCL: a ring of g - 1 steps per pass, or, where the switch reduces and multicasts (NVLink
  // SHARP), each byte sent once to the switch and received once; its tuner takes the faster.
  const double ring_ns = ring(kind, bytes, g, bw, g - 1, alpha);
  if (link.multicast) {
    const double nvls_ns = kind == CollectiveKind::kAllReduce ? bytes / bw + 2 * alpha
                                                              : share * bytes / bw + alpha;
    if (nvls_ns < ring_ns) {
      used += " (NVLS)";
      return nvls_ns;
    }
  }
  used += " (ring)";
  return ring_ns;
}

}  // namespace

double collective_ns(CollectiveKind kind, double bytes, int ranks, int stride,
                     const InstanceSpec& instance, const CostData& data, const RankModel& rank,
                     std::string* over, bool inference) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const int per_instance = instance.devices * rank.ranks_per_device();
  // Members of the group inside one instance, and the instances it spans.
  const int g = stride >= per_instance ? 1 : std::min(ranks, std::max(1, per_instance / stride));
  const int k = ceil_div(ranks, g);
  const Efficiency& eff = rank.efficiency();
  const LinkSpec& up = data.link(instance.scale_up);
  const LinkSpec& out = data.link(instance.scale_out);
  std::string used;
  // An all-to-all sends each member of the group its piece: g / ranks of the buffer stays inside
  // the instance.
  const double local = kind == CollectiveKind::kAllToAll ? bytes * g / ranks : bytes;

  double total = 0;
  if (g > 1) {
    if (rank.gpu()) {
      used = up.name;
      total += nvswitch_ns(kind, local, g, up, up.gbytes_per_s * eff.link, inference, used);
    } else {
      double bw = 0, steps = 0;
      // Members per chip and chips; every rank of a chip takes part in a collective of its own
      // group at the same time, so the chip's links are shared by all its ranks.
      const int rpc = rank.ranks_per_device();
      const int c = stride >= rpc ? 1 : std::min(g, rpc / stride);
      const int m = ceil_div(g, c);
      if (m == 1) {
        // Inside one chip the data moves through HBM: each byte is read and written.
        bw = rank.hbm_bytes_per_ns() * eff.hbm / 2;
        used = "HBM (one chip)";
        steps = c - 1;
      } else {
        bw = up.gbytes_per_s * eff.link / rpc;
        used = up.name;
        // Neuron's runtime picks the algorithm by size, as the simulated clock does (the link
        // model, LinkModel.h: a mesh, 2 steps per pass; recursive doubling-halving, 1 +
        // log2(chips)); rings step along each torus dimension. An all-to-all is a mesh pattern
        // whatever its size.
        const CollectiveAlgorithm algorithm = kind == CollectiveKind::kAllToAll
                                                  ? CollectiveAlgorithm::kMesh
                                                  : algorithm_for(up, bytes);
        if (algorithm != CollectiveAlgorithm::kRing) {
          steps = steps_per_pass(algorithm, g, m);
          used += std::string(" (") + collective_algorithm_name(algorithm) + ")";
        } else {
          const int ax = std::min(instance.torus_x, m);
          const int ay = ceil_div(m, ax);
          steps = (c - 1) + (ax - 1) + (ay - 1);
        }
      }
      total += ring(kind, local, g, bw, steps, up.hop_latency_us * 1e3);
    }
  }
  if (k > 1) {
    // Every rank of an instance talks to other instances at once: the NICs are shared by all.
    const double bw = instance.efa_gbits_per_s / 8 * eff.link / per_instance;
    // After the intra-instance reduce-scatter each member carries 1/g of the buffer.
    const double buffer =
        kind == CollectiveKind::kSend || kind == CollectiveKind::kAllToAll ? bytes : bytes / g;
    total += ring(kind, buffer, k, bw, k - 1, out.hop_latency_us * 1e3);
    used += (used.empty() ? "" : " + ") + out.name;
  }
  if (kind == CollectiveKind::kSend && k > 1 && g > 1) {
    // A send crosses one boundary only: the inter-instance hop, not an intra ring as well.
    const double bw = instance.efa_gbits_per_s / 8 * eff.link / per_instance;
    total = bytes / bw + out.hop_latency_us * 1e3;
    used = out.name;
  }
  // The compute engines trigger the collective (its own cores run it) and wait for its
  // completion semaphore: one dependent-step latency.
  total += eff.op_latency_us * 1e3;
  if (over != nullptr) *over = used;
  return total;
}

}  // namespace nrtsim::cost
