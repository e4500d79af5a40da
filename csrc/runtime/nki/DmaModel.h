// What a DMA transfer of an NKI kernel costs on a NeuronCore: its bytes go as descriptors (one
// per contiguous run the source and destination share, no longer than a partition's row on the
// SBUF side nor than max_descriptor_bytes), spread over the core's DMA engines (queues). Each
// engine a transfer uses pays a fixed setup, then per descriptor a fixed cost and its bytes at
// the engine's rate; the data is usable latency_ns after the last engine finishes. Small or
// strided transfers are therefore slow, and large contiguous ones approach engines x rate, as
// AWS's DMA bandwidth guide and NKI performance guide describe. The figures, with their sources,
// live in the data file (nki/data/dma.ini), one section per NeuronCore version.
#pragma once

#include <map>
#include <string>

#include "runtime/nki/Program.h"

namespace nrtsim::nki {

struct DmaSpec {
  int engines = 16;                   // DMA engines (queues) per NeuronCore
  double engine_bytes_per_ns = 0;     // one engine's peak rate
  double transfer_fixed_ns = 0;       // per engine a transfer uses: descriptor setup, sync
  double descriptor_ns = 0;           // per descriptor (packet) an engine processes
  double max_descriptor_bytes = 0;    // a longer contiguous run is split
  double latency_ns = 0;              // from the last engine's end until consumers may read
  double transpose_efficiency_2byte = 1;  // DMA transpose rate / normal rate (dma_transpose)
  double transpose_efficiency_4byte = 1;
};

// NeuronCore version ("v2", "v3", "v4") -> its DMA figures. Throws Error(kConfiguration) naming
// the file, line and key for anything it cannot read.
std::map<std::string, DmaSpec> parse_dma_model(const std::string& text, const std::string& origin);
// The file the interpreter's timelines read (set by the nki package at import; NRTSIM_DMA_MODEL
// overrides it), and the spec of one NeuronCore version from it (loaded once per path).
void set_default_dma_model_path(const std::string& path);
const DmaSpec& dma_spec(const std::string& neuroncore);

// How a transfer `in` (kDmaCopy, kDmaCompute, kMemset on the DMA engine) splits: descriptors, bytes each, and
// whether it is a DMA transpose.
struct DmaShape {
  int64_t descriptors = 0;
  double descriptor_bytes = 0;
  bool transpose = false;
  size_t element_bytes = 0;
};
DmaShape dma_shape(const Program& program, const Instruction& in, const DmaSpec& spec);

}  // namespace nrtsim::nki
