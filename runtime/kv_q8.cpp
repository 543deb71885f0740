#include "runtime/kv_q8.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/formats.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"

namespace zenmoe {

namespace {

void widen_blocks_scalar(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = ref::fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// Compiled for AVX-512 whatever the build flags; only called when the ISA model says the host
// has it. Same arithmetic as the scalar loop: code widened exactly, one rounding in the product.
// GCC 12 flags the `_mm512_undefined_*` passthrough inside the conversion intrinsics as
// maybe-uninitialised, and the shuffle intrinsics as uninitialised (false positives: the mask is
// all ones), hence the pragmas.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
__attribute__((target("avx512f,avx512bw"))) void widen_blocks_avx512(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const __m512 d = _mm512_set1_ps(ref::fp16_to_fp32(b[i].d));
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16));
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
  }
}

#pragma GCC diagnostic pop

}  // namespace

void kv_q8_0_store_row(const float* x, void* dst, int64_t n) { ref::from_float_q8_0(x, dst, n); }

void kv_q8_0_widen_rows(const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t width, float* dst,
                        bool avx512) {
  const int64_t nb = width / kQK;
  for (int64_t r = 0; r < rows; ++r, src += row_bytes, dst += width) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
    if (avx512) widen_blocks_avx512(b, dst, nb);
    else widen_blocks_scalar(b, dst, nb);
  }
}

}  // namespace zenmoe
