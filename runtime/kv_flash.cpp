#include "runtime/kv_flash.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "kernels/ref/fp16.h"
#include "runtime/kv_f16.h"
#include "runtime/kv_q8.h"

namespace zenmoe {

FlashScratch::~FlashScratch() { ::operator delete(block_, std::align_val_t{64}); }

FlashScratch& FlashScratch::operator=(FlashScratch&& o) noexcept {
  if (this != &o) {
    ::operator delete(block_, std::align_val_t{64});
    block_ = std::exchange(o.block_, nullptr);
    floats_ = std::exchange(o.floats_, 0);
    qt = std::exchange(o.qt, nullptr);
    tile = std::exchange(o.tile, nullptr);
    s = std::exchange(o.s, nullptr);
    yt = std::exchange(o.yt, nullptr);
    stats = std::exchange(o.stats, nullptr);
  }
  return *this;
}

void FlashScratch::reserve(int64_t width, int64_t v_width, int64_t lanes) {
  auto up = [](int64_t f) { return (f + 15) / 16 * 16; };  // whole cache lines per piece
  const int64_t nqt = up(width * lanes), ntile = up(kFlashTileRows * width), ns = kFlashTileRows * lanes,
                nyt = v_width * lanes, nstats = 3 * lanes;
  const int64_t need = nqt + ntile + ns + nyt + nstats;
  if (need > floats_) {
    ::operator delete(block_, std::align_val_t{64});
    block_ = static_cast<float*>(::operator new(static_cast<size_t>(need) * sizeof(float), std::align_val_t{64}));
    floats_ = need;
  }
  qt = block_;
  tile = qt + nqt;
  s = tile + ntile;
  yt = s + ns;
  stats = yt + nyt;
}

namespace {

// Compiled for AVX-512 F/BW whatever the build flags; only called when the ISA model says the
// host has it. GCC 12 flags the `_mm512_undefined_*` passthrough inside some intrinsics as
// maybe-uninitialised (false positives), hence the pragmas.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define ZM_AVX512 __attribute__((target("avx512f,avx512bw")))

// expf for x <= 0: Cody-Waite reduction by ln 2 and a degree-6 polynomial (Cephes' expf
// coefficients), 2^n applied by vscalefps. Below -87 the result is (at most) 1.6e-38 instead of
// a denormal or zero: negligible against the softmax sum, which is at least 1.
ZM_AVX512 inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// Scores of JB tile rows for GB lane groups (heads 16 g .. 16 g + 15) from g0: s[j][g] sums
// row_j[d] * qt[d][g] over d, in runs of kScoreRun terms added into s (a long chain of single
// additions would lose more to rounding than the reference's double sum warrants). Every loop
// over the accumulators is unrolled: an array indexed at run time would live in memory.
constexpr int64_t kScoreRun = 64;

template <int GB, int JB>
ZM_AVX512 void scores_block(const float* tile, int64_t width, const float* qt, int64_t lanes, int64_t g0, float* s) {
  static_assert(GB * JB <= 24, "accumulators must fit the register file");
  for (int64_t d0 = 0; d0 < width; d0 += kScoreRun) {
    const int64_t d1 = std::min(width, d0 + kScoreRun);
    __m512 acc[JB][GB];
#pragma GCC unroll 24
    for (int j = 0; j < JB; ++j)
#pragma GCC unroll 4
      for (int g = 0; g < GB; ++g) acc[j][g] = _mm512_setzero_ps();
    const float* q = qt + d0 * lanes + 16 * g0;
    for (int64_t d = d0; d < d1; ++d, q += lanes) {
      __m512 qv[GB];
#pragma GCC unroll 4
      for (int g = 0; g < GB; ++g) qv[g] = _mm512_load_ps(q + 16 * g);
#pragma GCC unroll 24
      for (int j = 0; j < JB; ++j) {
        const __m512 b = _mm512_set1_ps(tile[j * width + d]);
#pragma GCC unroll 4
        for (int g = 0; g < GB; ++g) acc[j][g] = _mm512_fmadd_ps(b, qv[g], acc[j][g]);
      }
    }
#pragma GCC unroll 24
    for (int j = 0; j < JB; ++j)
#pragma GCC unroll 4
      for (int g = 0; g < GB; ++g) {
        float* out = s + j * lanes + 16 * (g0 + g);
        _mm512_store_ps(out, d0 == 0 ? acc[j][g] : _mm512_add_ps(_mm512_load_ps(out), acc[j][g]));
      }
  }
}

// The next tile's cache lines, asked for a few at a time from the value loops (every row of
// every value block takes a step): spread over the tile's work, the misses overlap with it. A
// burst of prefetches instead fills the core's miss buffers and stalls it until they land.
struct TilePrefetch {
  const char* next = nullptr;  // next line to ask for
  int64_t left = 0;            // lines left
  int64_t per = 0;             // lines per step
  void step() {
    for (int64_t i = 0; i < per && left > 0; ++i, --left, next += 64) _mm_prefetch(next, _MM_HINT_T0);
  }
};

// Value sums of CB columns from c0 for GB lane groups from g0, over the tile's nj rows:
// yt[c][g] = yt[c][g] * alpha[g] + sum_j p[j][g] * row_j[c].
template <int GB, int CB>
ZM_AVX512 void values_block(const float* tile, int64_t width, const float* p, int64_t lanes, int64_t g0, int64_t c0,
                            int64_t nj, const float* alpha, float* yt, TilePrefetch& pf) {
  static_assert(GB * CB <= 24, "accumulators must fit the register file");
  __m512 acc[CB][GB];
#pragma GCC unroll 16
  for (int c = 0; c < CB; ++c)
#pragma GCC unroll 4
    for (int g = 0; g < GB; ++g)
      acc[c][g] = _mm512_mul_ps(_mm512_load_ps(yt + (c0 + c) * lanes + 16 * (g0 + g)), _mm512_load_ps(alpha + 16 * (g0 + g)));
  for (int64_t j = 0; j < nj; ++j) {
    pf.step();
    __m512 pv[GB];
#pragma GCC unroll 4
    for (int g = 0; g < GB; ++g) pv[g] = _mm512_load_ps(p + j * lanes + 16 * (g0 + g));
#pragma GCC unroll 16
    for (int c = 0; c < CB; ++c) {
      const __m512 b = _mm512_set1_ps(tile[j * width + c0 + c]);
#pragma GCC unroll 4
      for (int g = 0; g < GB; ++g) acc[c][g] = _mm512_fmadd_ps(b, pv[g], acc[c][g]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < CB; ++c)
#pragma GCC unroll 4
    for (int g = 0; g < GB; ++g) _mm512_store_ps(yt + (c0 + c) * lanes + 16 * (g0 + g), acc[c][g]);
}

// The tile is widened and scored kScoreRows rows at a time, so the scores read rows that are
// still in L1 (12 rows of 576 floats: 27 KB).
constexpr int64_t kScoreRows = 12;
static_assert(kFlashTileRows % kScoreRows == 0);

// Lane groups [g0, g0 + GB): the scores of kScoreRows rows, or the value sums of the tile's
// rows over every column (CB at a time, single columns for the rest).
template <int GB>
struct Groups {
  // Score blocks of at most 12 rows: each row is a base pointer the loop keeps in a register.
  static constexpr int kJB = GB <= 2 ? 12 : 6, kCB = GB == 1 ? 16 : GB == 4 ? 4 : 8;
  static_assert(kScoreRows % kJB == 0);
  ZM_AVX512 static void scores(const float* tile, int64_t width, const float* qt, int64_t lanes, int64_t g0, float* s) {
    for (int64_t j = 0; j < kScoreRows; j += kJB)
      scores_block<GB, kJB>(tile + j * width, width, qt, lanes, g0, s + j * lanes);
  }
  ZM_AVX512 static void values(const float* tile, int64_t width, int64_t v_width, const float* p, int64_t lanes,
                               int64_t g0, int64_t nj, const float* alpha, float* yt, TilePrefetch& pf) {
    int64_t c = 0;
    for (; c + kCB <= v_width; c += kCB) values_block<GB, kCB>(tile, width, p, lanes, g0, c, nj, alpha, yt, pf);
    for (; c < v_width; ++c) values_block<GB, 1>(tile, width, p, lanes, g0, c, nj, alpha, yt, pf);
  }
};

// Runs fn(Groups<GB>, g0) over lane groups [0, ng) four at a time, the rest as one call.
template <typename Fn>
ZM_AVX512 void by_lane_groups(int64_t ng, Fn&& fn) {
  int64_t g = 0;
  for (; g + 4 <= ng; g += 4) fn(Groups<4>{}, g);
  switch (ng - g) {
    case 1: fn(Groups<1>{}, g); break;
    case 2: fn(Groups<2>{}, g); break;
    case 3: fn(Groups<3>{}, g); break;
    default: break;
  }
}

// Rows [j0, j0 + nj) of the cache as F32 into the tile, then zero rows up to `fill` rows. F16
// and Q8_0 rows use the cache's own widening (runtime/kv_f16.h, runtime/kv_q8.h).
ZM_AVX512 void widen_tile(const uint8_t* rows, int64_t row_bytes, KvCacheType kv, int64_t j0, int64_t nj,
                          int64_t fill, int64_t width, float* tile) {
  const uint8_t* src = rows + j0 * row_bytes;
  if (kv == KvCacheType::Q8_0) {
    kv_q8_0_widen_rows(src, row_bytes, nj, width, tile, true);
  } else {
    for (int64_t j = 0; j < nj; ++j, src += row_bytes) {
      float* dst = tile + j * width;
      if (kv == KvCacheType::F16) {
        kv_f16_widen_row(reinterpret_cast<const f16_t*>(src), dst, width, true);
      } else if (kv == KvCacheType::BF16) {  // a bf16 value is the high half of its f32
        const auto* b = reinterpret_cast<const bf16_t*>(src);
        int64_t i = 0;
        for (; i + 16 <= width; i += 16)
          _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                                              reinterpret_cast<const __m256i*>(b + i))),
                                                          16));
        for (; i < width; ++i) dst[i] = ref::bf16_to_fp32(b[i]);
      } else {
        std::memcpy(dst, src, static_cast<size_t>(width) * sizeof(float));
      }
    }
  }
  if (fill > nj) std::memset(tile + nj * width, 0, static_cast<size_t>((fill - nj) * width) * sizeof(float));
}

// Scales the tile's scores, folds them into the running maxima and sums (stats: max, sum,
// rescale factor per lane) and turns the first nj rows into probabilities relative to the new
// maxima (the value sums read no further).
ZM_AVX512 void online_softmax(float* s, int64_t lanes, int64_t nj, float scale, float* stats) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t l = 0; l < lanes; l += 16) {
    __m512 mt = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < nj; ++j) {
      const __m512 v = _mm512_mul_ps(_mm512_load_ps(s + j * lanes + l), sc);
      _mm512_store_ps(s + j * lanes + l, v);
      mt = _mm512_max_ps(mt, v);
    }
    const __m512 m_old = _mm512_load_ps(stats + l), m_new = _mm512_max_ps(m_old, mt);
    // On the first tile the old maximum is -inf: the factor is tiny (see exp_nonpositive) and
    // scales sums that are still zero.
    const __m512 alpha = exp_nonpositive(_mm512_sub_ps(m_old, m_new));
    __m512 sum = _mm512_mul_ps(_mm512_load_ps(stats + lanes + l), alpha);
    for (int64_t j = 0; j < nj; ++j) {
      const __m512 pr = exp_nonpositive(_mm512_sub_ps(_mm512_load_ps(s + j * lanes + l), m_new));
      _mm512_store_ps(s + j * lanes + l, pr);
      sum = _mm512_add_ps(sum, pr);
    }
    _mm512_store_ps(stats + l, m_new);
    _mm512_store_ps(stats + lanes + l, sum);
    _mm512_store_ps(stats + 2 * lanes + l, alpha);
  }
}

// y[k * v_width + c] = yt[c][k] * inv[k] for k < m: 16 x 16 blocks transposed in registers.
ZM_AVX512 void transpose_out(const float* yt, int64_t lanes, int64_t m, int64_t v_width, const float* inv, float* y) {
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int64_t k0 = 0; k0 < m; k0 += 16) {
    const __m512 scale = _mm512_load_ps(inv + k0);
    const int64_t mk = std::min<int64_t>(16, m - k0);
    int64_t c0 = 0;
    for (; c0 + 16 <= v_width; c0 += 16) {
      // Rows are columns c0 + i (lanes = heads); four rounds of interleaving pairs of rows
      // (lanes i and 16 + i of the two sources) transpose the block.
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_mul_ps(_mm512_load_ps(yt + (c0 + i) * lanes + k0), scale);
      for (int round = 0; round < 4; ++round) {
        __m512 t[16];
        for (int i = 0; i < 8; ++i) {
          t[2 * i] = _mm512_permutex2var_ps(r[i], lo, r[i + 8]);
          t[2 * i + 1] = _mm512_permutex2var_ps(r[i], hi, r[i + 8]);
        }
        std::copy(t, t + 16, r);
      }
      for (int64_t k = 0; k < mk; ++k) _mm512_storeu_ps(y + (k0 + k) * v_width + c0, r[k]);
    }
    for (; c0 < v_width; ++c0)
      for (int64_t k = 0; k < mk; ++k) y[(k0 + k) * v_width + c0] = yt[c0 * lanes + k0 + k] * inv[k0 + k];
  }
}

ZM_AVX512 void decode(const float* q, int64_t m, const uint8_t* rows, int64_t row_bytes, KvCacheType kv, int64_t n,
                      int64_t width, int64_t v_width, float scale, float* y, FlashScratch& sc, float* smax,
                      float* inv) {
  const int64_t ng = (m + 15) / 16, lanes = 16 * ng;
  sc.reserve(width, v_width, lanes);
  for (int64_t d = 0; d < width; ++d) {
    float* qt = sc.qt + d * lanes;
    for (int64_t k = 0; k < m; ++k) qt[k] = q[k * width + d];
    std::fill(qt + m, qt + lanes, 0.0f);
  }
  std::fill(sc.stats, sc.stats + lanes, -std::numeric_limits<float>::infinity());
  std::fill(sc.stats + lanes, sc.stats + 2 * lanes, 0.0f);
  std::fill(sc.yt, sc.yt + v_width * lanes, 0.0f);
  for (int64_t j0 = 0; j0 < n; j0 += kFlashTileRows) {
    const int64_t nj = std::min(kFlashTileRows, n - j0);
    // The next tile's rows are prefetched from the value loops: one step per row of each value
    // block, ng / 4 passes of v_width / kCB blocks (at least v_width / 16 blocks).
    const int64_t next_rows = std::min(kFlashTileRows, n - j0 - nj);
    TilePrefetch pf{reinterpret_cast<const char*>(rows + (j0 + nj) * row_bytes), (next_rows * row_bytes + 63) / 64, 0};
    const int64_t steps = std::max<int64_t>(1, nj * ((ng + 3) / 4) * std::max<int64_t>(1, v_width / 16));
    pf.per = (pf.left + steps - 1) / steps;
    for (int64_t j = 0; j < nj; j += kScoreRows) {
      float* sub = sc.tile + j * width;
      widen_tile(rows, row_bytes, kv, j0 + j, std::min(kScoreRows, nj - j), kScoreRows, width, sub);
      by_lane_groups(ng, [&](auto grp, int64_t g0) { grp.scores(sub, width, sc.qt, lanes, g0, sc.s + j * lanes); });
    }
    online_softmax(sc.s, lanes, nj, scale, sc.stats);
    by_lane_groups(ng, [&](auto grp, int64_t g0) {
      grp.values(sc.tile, width, v_width, sc.s, lanes, g0, nj, sc.stats + 2 * lanes, sc.yt, pf);
    });
  }
  float* inv_sum = sc.stats + 2 * lanes;  // the rescale factors are no longer needed
  for (int64_t k = 0; k < lanes; ++k) inv_sum[k] = k < m ? 1.0f / sc.stats[lanes + k] : 0.0f;
  transpose_out(sc.yt, lanes, m, v_width, inv_sum, y);
  if (smax != nullptr) std::copy(sc.stats, sc.stats + m, smax);
  if (inv != nullptr) std::copy(inv_sum, inv_sum + m, inv);
}

#pragma GCC diagnostic pop

}  // namespace

void kv_flash_decode_avx512(const float* q, int64_t m, const uint8_t* rows, int64_t row_bytes, KvCacheType kv,
                            int64_t n, int64_t width, int64_t v_width, float scale, float* y, FlashScratch& sc,
                            float* smax, float* inv) {
  decode(q, m, rows, row_bytes, kv, n, width, v_width, scale, y, sc, smax, inv);
}

}  // namespace zenmoe
