#include "runtime/kv_q8.h"

#include <immintrin.h>

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
// maybe-uninitialised (a false positive: the mask is all ones), hence the pragma.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512bw"))) void widen_blocks_avx512(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const __m512 d = _mm512_set1_ps(ref::fp16_to_fp32(b[i].d));
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16));
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
  }
}

// One Q8_0 block as 32 floats in two registers: codes widened exactly, times the scale.
__attribute__((target("avx512f,avx512bw"))) inline void load_block(const BlockQ8_0* b, __m512* v0, __m512* v1) {
  const __m512 d = _mm512_set1_ps(ref::fp16_to_fp32(b->d));
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16));
  *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d);
  *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d);
}

// G query rows against every cache row: each block is widened once and used by G dot
// products held in registers.
template <int G>
__attribute__((target("avx512f,avx512bw"))) void scores_group(const float* q, int64_t width, const uint8_t* rows,
                                                             int64_t row_bytes, int64_t n_rows, float* s,
                                                             int64_t ld_s) {
  const int64_t nb = width / kQK;
  for (int64_t j = 0; j < n_rows; ++j) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(rows + j * row_bytes);
    __m512 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m512 v0, v1;
      load_block(blk + b, &v0, &v1);
      for (int g = 0; g < G; ++g) {
        const float* qg = q + g * width + b * kQK;
        acc[g] = _mm512_fmadd_ps(v0, _mm512_loadu_ps(qg), acc[g]);
        acc[g] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(qg + 16), acc[g]);
      }
    }
    for (int g = 0; g < G; ++g) s[g * ld_s + j] = _mm512_reduce_add_ps(acc[g]);
  }
}

// G probability rows times the cache rows, one 32-column block of the value at a time: the
// G x 32 outputs stay in registers over all rows.
template <int G>
__attribute__((target("avx512f,avx512bw"))) void values_group(const float* p, int64_t ld_p, const uint8_t* rows,
                                                             int64_t row_bytes, int64_t n_rows, int64_t v_width,
                                                             float* y) {
  for (int64_t b = 0; b < v_width / kQK; ++b) {
    __m512 acc[2 * G];
    for (int g = 0; g < 2 * G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n_rows; ++j) {
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
#pragma GCC diagnostic pop

constexpr int kGroup = 8;  // query rows per pass: 8 accumulators (scores), 16 (values)

// Runs fn<G> over the m rows in groups of kGroup, the remainder with its own G.
template <template <int> class Fn, typename... A>
void by_groups(int64_t m, A... a) {
  int64_t h = 0;
  for (; h + kGroup <= m; h += kGroup) Fn<kGroup>::run(h, a...);
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
  by_groups<ScoresFn>(m, q, width, rows, row_bytes, n_rows, s, ld_s);
}

void kv_q8_0_values_avx512(const float* p, int64_t ld_p, int64_t m, const uint8_t* rows, int64_t row_bytes,
                           int64_t n_rows, int64_t v_width, float* y) {
  by_groups<ValuesFn>(m, p, ld_p, rows, row_bytes, n_rows, v_width, y);
}

}  // namespace zenmoe
