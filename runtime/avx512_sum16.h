// Horizontal sums of 16 AVX-512 float vectors at once, for attention kernels that keep one
// accumulator per (query, cache row) pair. Compiled for AVX-512 F whatever the build flags;
// callers reach it only where the ISA model says the host has AVX-512.
#pragma once

#include <immintrin.h>

namespace zenmoe {

// Lane 4k + m of the result is the sum of a[4m + k]. A tree of two-source shuffles (halves,
// quarters, pairs, lanes) instead of 16 separate reductions.
__attribute__((target("avx512f"))) inline __m512 sum16(const __m512* a) {
  __m512 t[8], u[4], v[2];
  for (int i = 0; i < 8; ++i)
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 4; ++i)
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; ++i) {
    const __m512d x = _mm512_castps_pd(u[2 * i]), y = _mm512_castps_pd(u[2 * i + 1]);
    v[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

}  // namespace zenmoe
