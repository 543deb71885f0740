// Pieces shared by the KV cache attention kernels (kv_q8, kv_bf16): horizontal sums of 16
// accumulators at once, and the dispatch of a run-time head count onto kernels templated on it.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace zenmoe {

// Lane 4k + m of the result is the sum of a[4m + k]. A tree of two-source shuffles (halves,
// quarters, pairs, lanes) instead of 16 separate reductions. Compiled for AVX-512 F whatever the
// build flags; callers reach it only where the ISA model says the host has it.
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

// Runs Fn<G>::run(h, a...) over the m query rows h in groups of Big, then of 8, the remainder
// (fewer than 8) with its own G.
template <template <int> class Fn, int Big, typename... A>
void by_groups(int64_t m, A... a) {
  int64_t h = 0;
  for (; h + Big <= m; h += Big) Fn<Big>::run(h, a...);
  for (; h + 8 <= m; h += 8) Fn<8>::run(h, a...);
  switch (m - h) {
    case 1: Fn<1>::run(h, a...); break;
    case 2: Fn<2>::run(h, a...); break;
    case 3: Fn<3>::run(h, a...); break;
    case 4: Fn<4>::run(h, a...); break;
    case 5: Fn<5>::run(h, a...); break;
    case 6: Fn<6>::run(h, a...); break;
    case 7: Fn<7>::run(h, a...); break;
    default: break;
  }
}

}  // namespace zenmoe
