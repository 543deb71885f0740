#include "runtime/kv_q8.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/formats.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"
#include "runtime/kv_kernels.h"

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

// The block's F16 scale in every lane (vcvtph2ps: exact, as ref::fp16_to_fp32).
__attribute__((target("avx512f,avx512bw"))) inline __m512 block_scale(const BlockQ8_0* b) {
  return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(b->d)));
}

// One Q8_0 block as 32 floats in two registers: codes widened exactly, times the scale.
__attribute__((target("avx512f,avx512bw"))) inline void load_block(const BlockQ8_0* b, __m512* v0, __m512* v1) {
  const __m512 d = block_scale(b);
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16));
  *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d);
  *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d);
}

// G query rows against R cache rows at a time (G x R dot products in registers): each block is
// widened once for G rows, each query vector loaded once for R cache rows. With `ahead`, the R
// rows kPrefetchRows further on are prefetched along the way, one block of each per block.
template <int G, int R>
__attribute__((target("avx512f,avx512bw"))) void scores_tile(const float* q, int64_t width, const uint8_t* rows,
                                                            int64_t row_bytes, int64_t j, float* s, int64_t ld_s,
                                                            bool ahead) {
  static_assert(G * R <= 16, "accumulators must fit the register file");
  const int64_t nb = width / kQK;
  const BlockQ8_0* blk[R];
  for (int r = 0; r < R; ++r) blk[r] = reinterpret_cast<const BlockQ8_0*>(rows + (j + r) * row_bytes);
  __m512 acc[16];
  for (int a = 0; a < G * R; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (ahead)
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(blk[r] + b) + kPrefetchRows * row_bytes, _MM_HINT_T0);
    __m512 v0[R], v1[R];
    for (int r = 0; r < R; ++r) load_block(blk[r] + b, &v0[r], &v1[r]);
    for (int g = 0; g < G; ++g) {
      const __m512 q0 = _mm512_loadu_ps(q + g * width + b * kQK), q1 = _mm512_loadu_ps(q + g * width + b * kQK + 16);
      for (int r = 0; r < R; ++r) {
        acc[g * R + r] = _mm512_fmadd_ps(v0[r], q0, acc[g * R + r]);
        acc[g * R + r] = _mm512_fmadd_ps(v1[r], q1, acc[g * R + r]);
      }
    }
  }
  if constexpr (G * R == 16) {
    alignas(64) float sums[16];
    _mm512_store_ps(sums, sum16(acc));
    for (int a = 0; a < 16; ++a) s[(a / R) * ld_s + j + a % R] = sums[4 * (a % 4) + a / 4];
  } else {
    for (int a = 0; a < G * R; ++a) s[(a / R) * ld_s + j + a % R] = _mm512_reduce_add_ps(acc[a]);
  }
}

// G query rows against every cache row: 16 rows one cache row at a time (each block widened
// once for all 16), fewer two cache rows at a time (each query vector loaded once for both).
template <int G>
__attribute__((target("avx512f,avx512bw"))) void scores_group(const float* q, int64_t width, const uint8_t* rows,
                                                             int64_t row_bytes, int64_t n_rows, float* s,
                                                             int64_t ld_s) {
  if constexpr (G == 16) {
    for (int64_t j = 0; j < n_rows; ++j)
      scores_tile<16, 1>(q, width, rows, row_bytes, j, s, ld_s, j + kPrefetchRows < n_rows);
  } else {
    int64_t j = 0;
    for (; j + 2 <= n_rows; j += 2)
      scores_tile<G, 2>(q, width, rows, row_bytes, j, s, ld_s, j + kPrefetchRows + 2 <= n_rows);
    if (j < n_rows) scores_tile<G, 1>(q, width, rows, row_bytes, j, s, ld_s, false);
  }
}

// G probability rows times the cache rows, one 32-column block of the value at a time: the
// G x 32 outputs stay in registers over a tile of kValueRows rows, read once per block (from L1
// after the first), while the next tile's value blocks are prefetched one line per row.

template <int G>
__attribute__((target("avx512f,avx512bw"))) void values_group(const float* p, int64_t ld_p, const uint8_t* rows,
                                                             int64_t row_bytes, int64_t n_rows, int64_t v_width,
                                                             float* y) {
  const int64_t nb = v_width / kQK;
  const int64_t lines = (nb * static_cast<int64_t>(sizeof(BlockQ8_0)) + 63) / 64;  // value lines per row
  for (int64_t j0 = 0; j0 < n_rows; j0 += kValueRows) {
    const int64_t j1 = std::min(n_rows, j0 + kValueRows);
    const bool ahead = j1 + kValueRows <= n_rows;
    int64_t slot = 0;  // counts rows over the tile's passes: one prefetch each
    for (int64_t b = 0; b < nb; ++b) {
      __m512 acc[2 * G];
      for (int g = 0; g < G; ++g) {
        float* yb = y + g * v_width + b * kQK;
        acc[2 * g] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(yb);
        acc[2 * g + 1] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(yb + 16);
      }
      for (int64_t j = j0; j < j1; ++j, ++slot) {
        if (ahead) prefetch_next_tile(rows + j1 * row_bytes, row_bytes, lines, slot);
        __m512 v0, v1;
        load_block(reinterpret_cast<const BlockQ8_0*>(rows + j * row_bytes) + b, &v0, &v1);
        for (int g = 0; g < G; ++g) {
          const __m512 pj = _mm512_set1_ps(p[g * ld_p + j]);
          acc[2 * g] = _mm512_fmadd_ps(pj, v0, acc[2 * g]);
          acc[2 * g + 1] = _mm512_fmadd_ps(pj, v1, acc[2 * g + 1]);
        }
      }
      for (int g = 0; g < G; ++g) {
        _mm512_storeu_ps(y + g * v_width + b * kQK, acc[2 * g]);
        _mm512_storeu_ps(y + g * v_width + b * kQK + 16, acc[2 * g + 1]);
      }
    }
  }
}
#pragma GCC diagnostic pop

constexpr int kGroup = 8;  // query rows per pass: 16 accumulators (scores 8 x 2 rows, values 8 x 2 vectors)

template <int G>
struct ScoresFn {
  static void run(int64_t h, const float* q, int64_t width, const uint8_t* rows, int64_t row_bytes, int64_t n_rows,
                  float* s, int64_t ld_s) {
    scores_group<G>(q + h * width, width, rows, row_bytes, n_rows, s + h * ld_s, ld_s);
  }
};

template <int G>
struct ValuesFn {
  static void run(int64_t h, const float* p, int64_t ld_p, const uint8_t* rows, int64_t row_bytes, int64_t n_rows,
                  int64_t v_width, float* y) {
    values_group<G>(p + h * ld_p, ld_p, rows, row_bytes, n_rows, v_width, y + h * v_width);
  }
};

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

void kv_q8_0_scores_avx512(const float* q, int64_t m, const uint8_t* rows, int64_t row_bytes, int64_t n_rows,
                           int64_t width, float* s, int64_t ld_s) {
  by_groups<ScoresFn, 16>(m, q, width, rows, row_bytes, n_rows, s, ld_s);
}

void kv_q8_0_values_avx512(const float* p, int64_t ld_p, int64_t m, const uint8_t* rows, int64_t row_bytes,
                           int64_t n_rows, int64_t v_width, float* y) {
  by_groups<ValuesFn, kGroup>(m, p, ld_p, rows, row_bytes, n_rows, v_width, y);
}

}  // namespace zenmoe
