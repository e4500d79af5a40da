// A kernel's timeline as the Python dict nki.KernelRun reads: shared by the nki package's
// binding (host runs) and torch_neuronx's (device launches). Header-only: pybind11 and the
// runtime, no torch.
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/EngineModel.h"
#include "runtime/nki/Timeline.h"

namespace nki_binding {

inline pybind11::dict timeline_dict(const nrtsim::nki::Timeline& t, const nrtsim::CoreSpec& spec,
                                    bool per_instruction) {
  namespace py = pybind11;
  py::dict busy, count, begin, end;
  for (nrtsim::Engine e : nrtsim::kAllEngines) {
    busy[nrtsim::engine_name(e)] = t.busy_ns[nrtsim::index_of(e)];
    count[nrtsim::engine_name(e)] = t.instruction_count[nrtsim::index_of(e)];
    begin[nrtsim::engine_name(e)] = t.engine_begin_ns[nrtsim::index_of(e)];
    end[nrtsim::engine_name(e)] = t.engine_end_ns[nrtsim::index_of(e)];
  }
  py::dict d;
  d["makespan_ns"] = t.makespan_ns;
  d["busy_ns"] = busy;
  d["instructions"] = count;
  d["engine_begin_ns"] = begin;
  d["engine_end_ns"] = end;
  d["matmul_flops"] = t.matmul_flops;
  d["dma_bytes"] = t.dma_bytes;
  d["dma_descriptors"] = t.dma_descriptors;
  // One physical core's BF16 peak: a multiply-accumulate is 2 FLOPs, GHz is cycles per ns.
  d["tensor_peak_flops_per_ns"] = 2.0 * spec.tensor_macs_per_cycle * spec.tensor_clock_ghz;
  if (per_instruction) {
    py::list times;
    for (const auto& it : t.instructions) times.append(py::make_tuple(it.start_ns, it.end_ns));
    d["instruction_times_ns"] = times;
  }
  return d;
}

}  // namespace nki_binding
