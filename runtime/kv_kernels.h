// Pieces of the BF16 KV cache attention kernels (kv_bf16): horizontal sums of 16
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

// Cache rows this far ahead of the ones being read are prefetched: a layer's cache was last read
// a whole forward pass ago and streams from memory, and the hardware prefetcher alone keeps too
// few lines in flight for rows read side by side. The prefetches are spread over the work, one
// line at a time: a burst of them fills the core's miss buffers and stalls it.
constexpr int64_t kPrefetchRows = 16;

// The value kernels read the cache in tiles of kValueRows rows, once per group of value columns
// (from L1 after the first), and meanwhile prefetch the next tile one line per call: `slot`
// counts the calls over the tile's passes, row slot % kValueRows and line slot / kValueRows of
// the `lines` value lines of each row, until all are asked for.
constexpr int64_t kValueRows = 128;

inline void prefetch_next_tile(const void* next_tile, int64_t row_bytes, int64_t lines, int64_t slot) {
  if (slot < kValueRows * lines)
    _mm_prefetch(static_cast<const char*>(next_tile) + (slot % kValueRows) * row_bytes + 64 * (slot / kValueRows),
                 _MM_HINT_T0);
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
