#include "runtime/kv_f16.h"

#include <immintrin.h>

namespace zenmoe {

namespace {

// Compiled for AVX-512 whatever the build flags; only called when the ISA model says the host
// has it. GCC 12 flags the `_mm512_undefined_*` passthrough inside some intrinsics as
// maybe-uninitialised (false positives), hence the pragmas.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
__attribute__((target("avx512f"))) void round_row_avx512(const float* x, f16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = ref::fp32_to_fp16(x[i]);
}

__attribute__((target("avx512f"))) void widen_row_avx512(const f16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < n; ++i) dst[i] = ref::fp16_to_fp32(src[i]);
}

#pragma GCC diagnostic pop

}  // namespace

void kv_f16_round_row(const float* x, f16_t* dst, int64_t n, bool avx512) {
  if (avx512)
    round_row_avx512(x, dst, n);
  else
    ref::fp32_to_fp16_row(x, dst, n);
}

void kv_f16_widen_row(const f16_t* src, float* dst, int64_t n, bool avx512) {
  if (avx512)
    widen_row_avx512(src, dst, n);
  else
    ref::fp16_to_fp32_row(src, dst, n);
}

}  // namespace zenmoe
