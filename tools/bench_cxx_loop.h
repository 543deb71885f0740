// The compiler-vectorised baseline loops, exposed so tests can check their numerics.
#pragma once

#include <cstdint>

#include "kernels/formats.h"
#include "kernels/status.h"
#include "tools/roofline.h"

namespace zenmoe::tools {

// y[r] = dot(dequant(row r), x) for r in [r0, r1); rows are row_bytes apart in GGUF layout.
using GemvRowsFn = void (*)(const uint8_t* w, int64_t row_bytes, const float* x, float* y,
                            int64_t cols, int64_t r0, int64_t r1);

// The loop for format t compiled for `isa` (which the caller has checked the host runs);
// Error for formats without a baseline loop.
Expected<GemvRowsFn> cxx_loop_rows_fn(GgmlType t, LoadIsa isa);

}  // namespace zenmoe::tools
