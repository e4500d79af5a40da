// Barrier: one lockstep barrier; its descriptor check also catches a rank that called another
// collective meanwhile.
#include "runtime/transport/Algorithms.h"

namespace nrtsim::transport::algorithms {

void barrier(Lockstep& g) {
  g.begin(Verb::kBarrier, DType::kOpaque1, 0, -1, 0);
  g.sync();
}

}  // namespace nrtsim::transport::algorithms
