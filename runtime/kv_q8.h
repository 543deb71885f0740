// Q8_0 rows of the MLA latent cache (ggml's block: 32 int8 codes and one F16 scale). The cache
// keeps a row per position as row_bytes(Q8_0, width) bytes. Decode-sized attention reads the
// rows directly (AVX-512 kernels below); larger batches widen a few hundred rows at a time into
// F32 scratch for SGEMM, so the full cache is never held in F32.
#pragma once

#include <cstdint>

namespace zenmoe {

// Quantises `n` floats (a multiple of 32) into Q8_0 blocks at dst (ggml's reference rounding).
void kv_q8_0_store_row(const float* x, void* dst, int64_t n);

// Widens `rows` Q8_0 rows of `width` elements each (a multiple of 32), `row_bytes` apart,
// into dense F32 rows of `width`. avx512: the caller checked the ISA model allows AVX-512
// F/BW; the results are bit-identical either way (one product per element).
void kv_q8_0_widen_rows(const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t width, float* dst,
                        bool avx512);

// Decode-sized attention straight from Q8_0 rows, no F32 copy (AVX-512 F/BW only: the caller
// checked the ISA model). Rows are `width` elements (a multiple of 32), `row_bytes` apart.
// Scores: s[h * ld_s + j] = q_h · row_j for the m query rows q_h (width floats each, dense)
// and cache rows j < n_rows.
void kv_q8_0_scores_avx512(const float* q, int64_t m, const uint8_t* rows, int64_t row_bytes, int64_t n_rows,
                           int64_t width, float* s, int64_t ld_s);
// Values: y[h * v_width + i] = sum_j p[h * ld_p + j] * row_j[i] for i < v_width (a multiple
// of 32, at most width): the first v_width elements of each row are the value.
void kv_q8_0_values_avx512(const float* p, int64_t ld_p, int64_t m, const uint8_t* rows, int64_t row_bytes,
                           int64_t n_rows, int64_t v_width, float* y);

}  // namespace zenmoe
