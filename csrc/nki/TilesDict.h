// A NeuronCore generation's tile geometry (runtime/TensorTiles.h) as the Python dict both
// bindings hand out: torch_neuronx.core_model()["tiles"] (a running core) and
// nki._nki.tensor_tiles(chip) (the data file's chip, for the kernel checker's limits), so the
// two read the same keys. Header-only: pybind11 and the runtime, no torch.
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/TensorTiles.h"

namespace nki_binding {

inline pybind11::dict tiles_dict(const nrtsim::TensorTiles& t) {
  pybind11::dict d;
  d["tensor_partitions"] = t.partitions;
  d["tensor_stationary_columns"] = t.stationary_columns;
  d["tensor_moving_columns"] = t.moving_columns;
  d["tensor_min_moving_columns"] = t.min_moving_columns;
  d["sbuf_partition_bytes"] = t.sbuf_partition_bytes;
  d["psum_bank_bytes"] = t.psum_bank_bytes;
  d["psum_banks"] = t.psum_banks;
  return d;
}

}  // namespace nki_binding
