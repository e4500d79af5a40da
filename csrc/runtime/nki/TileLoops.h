// Loops over whole FP32 tiles that the interpreter's instructions run (Interpreter.cpp): written
// so that the CPU's vector units carry them, with each result computed by the same FP32
// operations in the same order as the plain loop would (the interpreter's values do not depend on
// how it is vectorised).
#pragma once

#include <cstdint>

#include "runtime/nki/Program.h"

namespace nrtsim::nki {

// tensor_tensor_scan over row-major [parts, per] tiles: per partition p, s = init[p] (or `start`
// when init is null); for each i in order, t = op0(x[i], s) (op0(s, x[i]) with reverse0),
// s = op1(t, y[i]) (op1(y[i], t) with reverse1), out[i] = s. `out` may be x or y itself (each
// element is read before its result is written) but must not overlap them otherwise.
void scan_partitions(Alu op0, Alu op1, bool reverse0, bool reverse1, const float* x,
                     const float* y, const float* init, float start, int64_t parts, int64_t per,
                     float* out);

// out[r] = op folded over row r of the row-major [rows, per] x, from `out[r]`'s value, left to
// right. max and min fold several lanes of each row at once where that gives the same value
// (the maximum's sign of zero is checked against the plain order).
void reduce_rows(Alu op, const float* x, int64_t rows, int64_t per, float* out);

// The index of the first element of x[0, n) equal to any of want[0, n_want), or n.
int64_t find_first_of(const float* x, int64_t n, const float* want, int n_want);

}  // namespace nrtsim::nki
