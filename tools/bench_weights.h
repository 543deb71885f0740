// Synthetic weights and activations for benchmarks: random quant codes with finite, normal
// scales (no NaN, infinity or subnormal that could send a float unit down a slow path), so
// timings do not depend on data quirks.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/formats.h"
#include "kernels/status.h"

namespace zenmoe::tools {

// Fills rows × cols weights of format t (GGUF row layout, row_bytes(t, cols) per row).
// Error if the format has no block layout known here or cols is not a multiple of its block.
Status fill_random_weights(GgmlType t, uint8_t* dst, int64_t rows, int64_t cols, uint64_t seed);

// n floats uniform in [-1, 1).
std::vector<float> random_activations(int64_t n, uint64_t seed);

// f32 -> f16 bits (round to nearest even; the benchmark data stays in the normal range).
uint16_t f32_to_f16_bits(float f);
// f32 -> bf16 bits, round to nearest even (spec §2 general rules).
uint16_t f32_to_bf16_bits(float f);

}  // namespace zenmoe::tools
