// Deterministic synthetic weights: a counter-based generator (value i of a tensor depends
// only on the seed, the tensor name and i), so tensors can be filled in parallel row ranges
// and the same seed always gives the same bytes, whatever the thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/status.h"
#include "tools/mkmodel_plan.h"

namespace zenmoe::tools {

// Per-tensor stream key from the model seed and the tensor name.
uint64_t tensor_stream_key(uint64_t seed, const std::string& name);

// Approximately N(0,1): the centred sum of four 16-bit uniforms of one 64-bit hash of
// (key, index), scaled to unit variance (bounded by ±2√3, which keeps synthetic weights free
// of the rare huge outliers a true Gaussian would give).
float synthetic_normal(uint64_t key, uint64_t index);

// Fills `dst` (exactly t.nbytes() bytes) with tensor t's values converted to t.type, using up
// to `threads` threads over row ranges. `done_bytes`, if given, grows as rows complete
// (progress reporting). Errors: t.type has no reference quantiser or the row length does
// not fit its block.
Status fill_tensor(const TensorPlan& t, uint64_t seed, uint8_t* dst, int threads,
                   std::atomic<uint64_t>* done_bytes = nullptr);

// Checks, before anything is written, that fill_tensor can produce t.
Status check_fillable(const TensorPlan& t);

}  // namespace zenmoe::tools
