// BF16 rows of the MLA latent cache. The cache keeps a row per position as `width` bf16
// values. Attention reads the rows directly with AVX512-BF16 dot products (vdpbf16ps: two bf16
// products per f32 lane, twice the multiply-adds of an F32 FMA per instruction), the query and
// probability rows rounded to bf16 first, token by token for prompts too; targets without
// AVX512-BF16 widen the rows to F32 for SGEMM.
#pragma once

#include <cstdint>

#include "kernels/ref/fp16.h"

namespace zenmoe {

// Rounds n floats to bf16 (round to nearest even, as ref::fp32_to_bf16). avx512: the caller
// checked the ISA model allows AVX-512 F/BW/VL (the rounding is integer arithmetic, no BF16
// instructions); the bits are identical either way.
void kv_bf16_round_row(const float* x, bf16_t* dst, int64_t n, bool avx512);

// AVX512-BF16 only (the caller checked the ISA model). Cache rows are `width` elements apart.
// Scores: s[h * ld_s + j] = q_h · row_j (f32 sums of exact bf16 products) for the m query rows
// q_h (width bf16 values each, dense) and cache rows j < n_rows.
void kv_bf16_scores_avx512(const bf16_t* q, int64_t m, const bf16_t* rows, int64_t width, int64_t n_rows, float* s,
                           int64_t ld_s);
// The probability rows p_h (m rows of n bf16 values, ld_p apart) as pairs of neighbouring
// entries, the layout the values kernel reads: pairs[(j / 2) * m + h] holds p_h[j] in its low
// half and p_h[j + 1] (zero past n) in its high half, for even j < n.
void kv_bf16_pairs(const bf16_t* p, int64_t ld_p, int64_t m, int64_t n, uint32_t* pairs);
// Values: y[h * v_width + i] = sum_j p_h[j] * row_j[i] for h < m, i < v_width (at most width),
// j < n_rows, from the probabilities as kv_bf16_pairs lays them out: the first v_width elements
// of each cache row are the value.
void kv_bf16_values_avx512(const uint32_t* pairs, int64_t m, const bf16_t* rows, int64_t width, int64_t n_rows,
                           int64_t v_width, float* y);

}  // namespace zenmoe
