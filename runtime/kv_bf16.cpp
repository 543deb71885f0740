#include "runtime/kv_bf16.h"

#include <immintrin.h>

#include "kernels/ref/fp16.h"

namespace zenmoe {

namespace {

// Compiled for AVX-512 whatever the build flags; only called when the ISA model says the host
// has it. GCC 12 flags the `_mm512_undefined_*` passthrough inside some intrinsics as
// maybe-uninitialised (false positives), hence the pragmas.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// 16 floats to bf16 with ref::fp32_to_bf16's integer rounding (nearest even, NaN kept quiet):
// bit-identical to it, denormals included (vcvtneps2bf16 would flush those).
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m256i round16(__m512i bits) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void round_row_avx512(const float* x, bf16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), round16(_mm512_loadu_si512(x + i)));
  if (i < n) {
    const auto m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(dst + i, m, round16(_mm512_maskz_loadu_epi32(m, x + i)));
  }
}

#pragma GCC diagnostic pop

}  // namespace

void kv_bf16_round_row(const float* x, bf16_t* dst, int64_t n, bool avx512) {
  if (avx512) round_row_avx512(x, dst, n);
  else ref::fp32_to_bf16_row(x, dst, n);
}

}  // namespace zenmoe
