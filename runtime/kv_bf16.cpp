#include "runtime/kv_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "runtime/kv_kernels.h"

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

// Elements [c, c + 32) of a bf16 row, zeros past `width`.
__attribute__((target("avx512f,avx512bw"))) inline __m512bh chunk(const bf16_t* row, int64_t c, int64_t width) {
  if (c + 32 <= width) return reinterpret_cast<__m512bh>(_mm512_loadu_si512(row + c));
  const auto m = static_cast<__mmask32>((uint64_t{1} << (width - c)) - 1);
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m, row + c));
}

// G query rows against R cache rows at a time (G x R dot products in registers): each cache
// chunk loaded once for G rows, each query chunk once for R cache rows. With P > 0, the P cache
// rows at `ahead` are prefetched along the way, one line of each per chunk (see scores_group).
template <int G, int R, int P = 0>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void scores_tile(const bf16_t* q, int64_t width,
                                                                       const bf16_t* rows, int64_t j, float* s,
                                                                       int64_t ld_s, const bf16_t* ahead = nullptr) {
  static_assert(G * R <= 16, "accumulators must fit the register file");
  // Every loop over the accumulators is unrolled: an array indexed at run time would live in
  // memory, one store per multiply-add.
  __m512 acc[16];
#pragma GCC unroll 16
  for (int a = 0; a < G * R; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t c = 0; c < width; c += 32) {
#pragma GCC unroll 4
    for (int r = 0; r < P; ++r) _mm_prefetch(reinterpret_cast<const char*>(ahead + r * width + c), _MM_HINT_T0);
    __m512bh k[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) k[r] = chunk(rows + (j + r) * width, c, width);
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      const __m512bh qv = chunk(q + g * width, c, width);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[g * R + r] = _mm512_dpbf16_ps(acc[g * R + r], qv, k[r]);
    }
  }
  if constexpr (G * R == 16) {
    __m512 out[16];  // a copy: sum16 takes an address, which would keep acc itself in memory
#pragma GCC unroll 16
    for (int a = 0; a < 16; ++a) out[a] = acc[a];
    alignas(64) float sums[16];
    _mm512_store_ps(sums, sum16(out));
    for (int a = 0; a < 16; ++a) s[(a / R) * ld_s + j + a % R] = sums[4 * (a % 4) + a / 4];
  } else {
#pragma GCC unroll 16
    for (int a = 0; a < G * R; ++a) s[(a / R) * ld_s + j + a % R] = _mm512_reduce_add_ps(acc[a]);
  }
}

// Rows kPrefetchRows ahead (kv_kernels.h) are prefetched along the dot products, one line per
// chunk: issued as one burst per step of rows they filled the core's miss buffers and stalled it
// (decode attention over a cache in DRAM ran 1.5x slower that way).
// The cache rows `count` rows ahead of row j, or nullptr past the end (then nothing is
// prefetched: the last rows are already on their way).
inline const bf16_t* ahead_rows(const bf16_t* rows, int64_t width, int64_t j, int64_t count, int64_t n_rows) {
  return j + kPrefetchRows + count <= n_rows ? rows + (j + kPrefetchRows) * width : nullptr;
}

// G query rows against every cache row: 8 or 16 rows in 4 x 4 tiles (each tile prefetching its
// share of the four rows ahead), fewer two cache rows at a time.
template <int G>
void scores_group(const bf16_t* q, int64_t width, const bf16_t* rows, int64_t n_rows, float* s, int64_t ld_s) {
  if constexpr (G == 16 || G == 8) {
    constexpr int kShare = 4 * 4 / G;  // rows each of the G / 4 tiles prefetches
    int64_t j = 0;
    for (; j + 4 <= n_rows; j += 4) {
      const bf16_t* ahead = ahead_rows(rows, width, j, 4, n_rows);
      for (int g = 0; g < G; g += 4) {
        if (ahead != nullptr)
          scores_tile<4, 4, kShare>(q + g * width, width, rows, j, s + g * ld_s, ld_s, ahead + (g / 4) * kShare * width);
        else
          scores_tile<4, 4>(q + g * width, width, rows, j, s + g * ld_s, ld_s);
      }
    }
    for (; j < n_rows; ++j)
      for (int g = 0; g < G; g += 8) scores_tile<8, 1>(q + g * width, width, rows, j, s + g * ld_s, ld_s);
  } else {
    int64_t j = 0;
    for (; j + 2 <= n_rows; j += 2) {
      if (const bf16_t* ahead = ahead_rows(rows, width, j, 2, n_rows))
        scores_tile<G, 2, 2>(q, width, rows, j, s, ld_s, ahead);
      else
        scores_tile<G, 2>(q, width, rows, j, s, ld_s);
    }
    if (j < n_rows) scores_tile<G, 1>(q, width, rows, j, s, ld_s);
  }
}

// Word i of a and word i of b side by side in dword i, for i < 16: a pair of cache rows as the
// (row j, row j + 1) pairs vdpbf16ps multiplies with a (p_j, p_j+1) pair.
alignas(64) constexpr uint16_t kInterleave[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};

// G heads' probabilities times the cache rows, 16 value columns at a time: the G x 16 outputs
// stay in registers over a tile of kValueRows rows, two rows per instruction. pairs[(j / 2) * m
// + g] holds the probabilities of rows j and j + 1 for head g, so every head's pair is one
// broadcast at a constant offset. A tile is read once per 16 columns, from L1 after the first
// time; while it is, the next tile's value columns are prefetched, one line per pair of rows.

template <int G>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void values_group(const uint32_t* pairs, int64_t m,
                                                                                 const bf16_t* rows, int64_t width,
                                                                                 int64_t n_rows, int64_t v_width,
                                                                                 float* y) {
  const __m512i idx = _mm512_load_si512(kInterleave);
  const int64_t lines = (v_width * 2 + 63) / 64;  // lines of value columns per row
  for (int64_t j0 = 0; j0 < n_rows; j0 += kValueRows) {
    const int64_t j1 = std::min(n_rows, j0 + kValueRows);
    const bool ahead = j1 + kValueRows <= n_rows;
    int64_t slot = 0;  // counts pairs of rows over the tile's passes: one prefetch each
    for (int64_t d0 = 0; d0 < v_width; d0 += 16) {
      const auto mask = static_cast<__mmask16>(v_width - d0 >= 16 ? 0xFFFFu : (1u << (v_width - d0)) - 1);
      __m512 acc[G];
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g)
        acc[g] = j0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y + g * v_width + d0);
      const uint32_t* pp = pairs + (j0 / 2) * m;
      for (int64_t j = j0; j < j1; j += 2, pp += m, ++slot) {
        if (ahead) prefetch_next_tile(rows + j1 * width, width * 2, lines, slot);
        const __m256i a = _mm256_maskz_loadu_epi16(mask, rows + j * width + d0);
        const __m256i b =
            j + 1 < n_rows ? _mm256_maskz_loadu_epi16(mask, rows + (j + 1) * width + d0) : _mm256_setzero_si256();
        const auto two_rows = reinterpret_cast<__m512bh>(
            _mm512_permutex2var_epi16(_mm512_zextsi256_si512(a), idx, _mm512_zextsi256_si512(b)));
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g)
          acc[g] = _mm512_dpbf16_ps(acc[g], two_rows,
                                    reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pp[g]))));
      }
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(y + g * v_width + d0, mask, acc[g]);
    }
  }
}
#pragma GCC diagnostic pop

template <int G>
struct ScoresFn {
  static void run(int64_t h, const bf16_t* q, int64_t width, const bf16_t* rows, int64_t n_rows, float* s,
                  int64_t ld_s) {
    scores_group<G>(q + h * width, width, rows, n_rows, s + h * ld_s, ld_s);
  }
};

template <int G>
struct ValuesFn {
  static void run(int64_t h, const uint32_t* pairs, int64_t m, const bf16_t* rows, int64_t width, int64_t n_rows,
                  int64_t v_width, float* y) {
    values_group<G>(pairs + h, m, rows, width, n_rows, v_width, y + h * v_width);
  }
};

}  // namespace

void kv_bf16_round_row(const float* x, bf16_t* dst, int64_t n, bool avx512) {
  if (avx512) round_row_avx512(x, dst, n);
  else ref::fp32_to_bf16_row(x, dst, n);
}

void kv_bf16_scores_avx512(const bf16_t* q, int64_t m, const bf16_t* rows, int64_t width, int64_t n_rows, float* s,
                           int64_t ld_s) {
  by_groups<ScoresFn, 16>(m, q, width, rows, n_rows, s, ld_s);
}

void kv_bf16_pairs(const bf16_t* p, int64_t ld_p, int64_t m, int64_t n, uint32_t* pairs) {
  for (int64_t h = 0; h < m; ++h) {
    const bf16_t* row = p + h * ld_p;
    for (int64_t j = 0; j < n; j += 2)
      pairs[(j / 2) * m + h] = row[j] | (j + 1 < n ? static_cast<uint32_t>(row[j + 1]) << 16 : 0u);
  }
}

void kv_bf16_values_avx512(const uint32_t* pairs, int64_t m, const bf16_t* rows, int64_t width, int64_t n_rows,
                           int64_t v_width, float* y) {
  by_groups<ValuesFn, 16>(m, pairs, m, rows, width, n_rows, v_width, y);
}

}  // namespace zenmoe
