// Q8_0 rows of the MLA latent cache (ggml's block: 32 int8 codes and one F16 scale). The cache
// keeps a row per position as row_bytes(Q8_0, width) bytes. Decode-sized attention widens a tile
// of rows at a time (the generated GlueOp::kAttnDecode); larger batches widen a few hundred rows at a time into
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

}  // namespace zenmoe
