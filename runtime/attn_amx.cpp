#include "runtime/attn_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace zenmoe {

namespace {

// Compiled for AMX whatever the build flags; only called when the ISA model says the host (and
// the OS) runs it. GCC 12 flags the `_mm512_undefined_*` passthrough inside some intrinsics as
// maybe-uninitialised (false positives), hence the pragmas.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define ZM_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,f16c,fma")))

constexpr int64_t kChunk = kAmxAttnChunk;
constexpr int64_t kTile = 1024;  // bytes of a 16 x 64-byte tile

// Palette 1, every tile 16 rows of 64 bytes. Tiles: scores 0-1 sums, 2-3 and 6-7 cache rows,
// 4-5 query parts; values 0-1 sums (a half of the heads each), 2-5 probability parts, 6-7 cache
// rows.
struct TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Byte offsets into the scratch for m query rows (groups of 16 heads).
struct Layout {
  int64_t groups = 0, kt = 0, ct = 0;
  int64_t qb = 0;      // [group][kt][hi, lo] tiles of query pairs
  int64_t planes = 0;  // [hi, lo][kChunk rows][W] bf16: f16 rows split, or a bf16 chunk's padded tail
  int64_t s = 0;       // [kChunk][16] f32 scores, then probabilities
  int64_t p = 0;       // [kChunk / 16 blocks][2 halves][hi, lo] probability tiles
  int64_t ctmp = 0;    // [2 halves] value sum tiles
  int64_t y = 0;       // [group][16][R] f32 running value sums
  int64_t stats = 0;   // [group][max, sum][16] f32
  int64_t total = 0;
};

Layout layout_for(int64_t m, int64_t W, int64_t R) {
  Layout L;
  L.groups = (m + 15) / 16;
  L.kt = W / 32;
  L.ct = R / 32;
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t o = at;
    at += (bytes + 63) / 64 * 64;
    return o;
  };
  L.qb = take(L.groups * L.kt * 2 * kTile);
  L.planes = take(2 * kChunk * W * 2);
  L.s = take(kChunk * 16 * 4);
  L.p = take(kChunk / 16 * 2 * 2 * kTile);
  L.ctmp = take(2 * kTile);
  L.y = take(L.groups * 16 * R * 4);
  L.stats = take(L.groups * 2 * 16 * 4);
  L.total = at;
  return L;
}

// 16 floats split into bf16 hi = v rounded and lo = (v - hi) rounded: 16 significant bits together.
ZM_AMX inline void split16(__m512 v, __m256i& hi, __m256i& lo) {
  const __m256bh h = _mm512_cvtneps_pbh(v);
  const __m512i wide = _mm512_cvtepu16_epi32(reinterpret_cast<const __m256i&>(h));
  const __m512 hv = _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  const __m256bh l = _mm512_cvtneps_pbh(_mm512_sub_ps(v, hv));
  hi = reinterpret_cast<const __m256i&>(h);
  lo = reinterpret_cast<const __m256i&>(l);
}

// 32 f16 values split exactly into bf16 hi + lo: hi their f32 forms rounded to bf16 (8 of f16's
// 11 significant bits; half up, by adding half a bf16 unit to the bits and cutting), lo the
// remainder (at most 3 bits, within half a unit of hi: exact in bf16 too). One permute takes the
// 32 hi halves, and hi widened back is the cut bits themselves.
ZM_AMX inline void split32_f16(__m512i raw, __m512i& hi, __m512i& lo) {
  const __m512 a = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
  const __m512 b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(raw, 1));
  const __m512i half = _mm512_set1_epi32(0x8000), cut = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i ar = _mm512_add_epi32(_mm512_castps_si512(a), half);
  const __m512i br = _mm512_add_epi32(_mm512_castps_si512(b), half);
  const __m512 ah = _mm512_castsi512_ps(_mm512_and_si512(ar, cut));
  const __m512 bh = _mm512_castsi512_ps(_mm512_and_si512(br, cut));
  const __m512i odd_words = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                             25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  hi = _mm512_permutex2var_epi16(ar, odd_words, br);
  const __m512bh l = _mm512_cvtne2ps_pbh(_mm512_sub_ps(b, bh), _mm512_sub_ps(a, ah));
  lo = reinterpret_cast<const __m512i&>(l);
}

// r[i][j] -> r[j][i] for a 16 x 16 block of 32-bit elements: pairs, then quads within 128-bit
// lanes, then the lanes (64 shuffles; 16 gathers of a column cost about four times as much).
ZM_AMX inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  __m512 u[16];
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // u[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3.
  for (int j = 0; j < 4; ++j) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    r[4 + j] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
}

// e^x for x <= 0 (softmax arguments): range reduction by ln 2 and a degree-6 polynomial,
// within a few ulp; below -87 the result is 0.
ZM_AMX inline __m512 exp_nonpos(__m512 x) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), _mm512_scalef_ps(p, n));
}

// Lines of (address, bytes) ranges asked into L2 a few per step, so the memory bus works while
// the tile unit does (a burst of prefetches fills the core's miss buffers and stalls the work
// between them).
struct LineStream {
  const int64_t* ranges = nullptr;
  int64_t count = 0, r = 0, at = 0;
  int64_t rate = 0, credit = 0;  // lines per unit of work and lines owed, in 1/256ths
  void init(const int64_t* list, int64_t n_ranges, int64_t units) {
    ranges = list;
    count = list != nullptr ? n_ranges : 0;
    r = at = credit = 0;
    int64_t lines = 0;
    for (int64_t i = 0; i < count; ++i) lines += (ranges[2 * i + 1] + 63) / 64;
    rate = units > 0 ? (lines << 8) / units + 1 : lines << 8;
  }
  // After `units` of work: the lines they owe.
  void step(int64_t units) {
    credit += rate * units;
    for (; credit >= 256 && r < count; credit -= 256) {
      _mm_prefetch(reinterpret_cast<const char*>(ranges[2 * r]) + at, _MM_HINT_T1);
      at += 64;
      if (at >= ranges[2 * r + 1]) {
        at = 0;
        ++r;
      }
    }
  }
};

class Attend {
 public:
  Attend(const AmxAttnCall& c, uint8_t* scratch) : c_(c), L_(layout_for(c.m, c.W, c.R)), sc_(scratch) {}

  ZM_AMX void run() {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
      cfg.colsb[t] = 64;
      cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    side_.init(c_.side, c_.side_ranges, call_units());
    for (int64_t g = 0; g < L_.groups; ++g) query_tiles(g);
    for (int64_t c0 = 0; c0 < c_.n; c0 += kChunk) {
      const int64_t nc = std::min(kChunk, c_.n - c0);
      const int64_t nb = (nc + 15) / 16;
      start_next(c0, nc);
      prepare_rows(c0, nc, nb);
      for (int64_t g = 0; g < L_.groups; ++g) {
        qb_ = sc_ + L_.qb + g * L_.kt * 2 * kTile;
        scores(nb);
        softmax(g, nc, nb, c0 == 0);
        probability_tiles(g, nb);
        values(g, nb, c0 == 0);
      }
    }
    _tile_release();
    finish();
  }

 private:
  const AmxAttnCall& c_;
  Layout L_;
  uint8_t* sc_;
  // The side stream over the whole call, and the next chunk's cache rows over the current one.
  LineStream side_, next_;
  int64_t next_range_[2] = {};
  // The chunk's blocks of 16 rows: where each one's rows start (hi plane) and their stride.
  const uint8_t* block_hi_[kChunk / 16] = {};
  int64_t block_stride_[kChunk / 16] = {};
  int64_t lo_offset_ = 0;  // f16: from a block's hi plane rows to its lo plane rows

  // Work of a chunk of nc rows in units of about one tile product's time (the tick() calls): a
  // row split (f16) 2, a score step (two blocks, 32 columns) 4 or 6, a value step (a block and a
  // column tile) 2 or 3 per half of the heads, for every head group.
  int64_t parts() const { return c_.f16 ? 3 : 2; }
  int64_t chunk_units(int64_t nc) const {
    const int64_t nb = (nc + 15) / 16;
    int64_t units = c_.f16 ? 2 * nc : 0;
    for (int64_t g = 0; g < L_.groups; ++g)
      units += (nb + 1) / 2 * L_.kt * 2 * parts() + (heads_in(g) > 8 ? 2 : 1) * L_.ct * parts() * nb;
    return units;
  }
  int64_t call_units() const {
    int64_t units = 0;
    for (int64_t c0 = 0; c0 < c_.n; c0 += kChunk) units += chunk_units(std::min(kChunk, c_.n - c0));
    return units;
  }
  // While chunk c0 is worked on, the rows of the one after it are asked into L2.
  void start_next(int64_t c0, int64_t nc) {
    const int64_t n1 = c0 + kChunk;
    const int64_t rows = n1 < c_.n ? std::min(kChunk, c_.n - n1) : 0;
    next_range_[0] = reinterpret_cast<int64_t>(c_.rows + n1 * c_.stride);
    next_range_[1] = rows * c_.stride;
    next_.init(rows > 0 ? next_range_ : nullptr, 1, chunk_units(nc));
  }
  void tick(int64_t units) {
    side_.step(units);
    next_.step(units);
  }

  float* f(int64_t off) const { return reinterpret_cast<float*>(sc_ + off); }
  int64_t heads_in(int64_t g) const { return std::min<int64_t>(16, c_.m - 16 * g); }

  // Query pair tiles of head group g: B[kp][2h + t] = q[h][32 kt + 2 kp + t], hi and lo parts.
  ZM_AMX void query_tiles(int64_t g) {
    const int64_t W = c_.W, heads = heads_in(g);
    // Split rows first (hi then lo, W bf16 each per head), in the planes (free until a chunk's
    // rows go there).
    auto* split = reinterpret_cast<uint16_t*>(sc_ + L_.planes);
    for (int64_t h = 0; h < 16; ++h) {
      uint16_t* hi = split + h * 2 * W;
      uint16_t* lo = hi + W;
      if (h >= heads) {
        std::memset(hi, 0, static_cast<size_t>(2 * W) * 2);
        continue;
      }
      const float* q = c_.q + (16 * g + h) * W;
      for (int64_t k = 0; k < W; k += 16) {
        __m256i a, b;
        split16(_mm512_loadu_ps(q + k), a, b);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + k), a);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + k), b);
      }
    }
    // Pairs (32-bit words) of head h start W / 2 words apart (hi, then lo): a 16 x 16 block of
    // them per tile, transposed.
    const auto* words = reinterpret_cast<const float*>(split);
    uint8_t* qb = sc_ + L_.qb + g * L_.kt * 2 * kTile;
    for (int64_t kt = 0; kt < L_.kt; ++kt)
      for (int part = 0; part < 2; ++part) {
        __m512 r[16];
        for (int64_t h = 0; h < 16; ++h) r[h] = _mm512_loadu_ps(words + h * W + part * (W / 2) + 16 * kt);
        transpose16(r);
        auto* tile = reinterpret_cast<float*>(qb + (kt * 2 + part) * kTile);
        for (int64_t kp = 0; kp < 16; ++kp) _mm512_store_ps(tile + kp * 16, r[kp]);
      }
  }

  // Where the chunk's blocks read their rows: a bf16 cache in place (a short last block copied
  // into zero-padded scratch), f16 rows split into the hi and lo planes.
  ZM_AMX void prepare_rows(int64_t c0, int64_t nc, int64_t nb) {
    const int64_t W = c_.W, plane_stride = 2 * W;
    uint8_t* planes = sc_ + L_.planes;
    lo_offset_ = kChunk * plane_stride;
    if (!c_.f16) {
      for (int64_t b = 0; b < nb; ++b) {
        block_hi_[b] = c_.rows + (c0 + 16 * b) * c_.stride;
        block_stride_[b] = c_.stride;
      }
      if (nc % 16 != 0) {
        const int64_t b = nb - 1, valid = nc - 16 * b;
        for (int64_t i = 0; i < 16; ++i) {
          uint8_t* dst = planes + i * plane_stride;
          if (i < valid)
            std::memcpy(dst, block_hi_[b] + i * c_.stride, static_cast<size_t>(plane_stride));
          else
            std::memset(dst, 0, static_cast<size_t>(plane_stride));
        }
        block_hi_[b] = planes;
        block_stride_[b] = plane_stride;
      }
      return;
    }
    for (int64_t i = 0; i < 16 * nb; ++i) {
      auto* hi = reinterpret_cast<uint16_t*>(planes + i * plane_stride);
      auto* lo = reinterpret_cast<uint16_t*>(planes + lo_offset_ + i * plane_stride);
      if (i >= nc) {
        std::memset(hi, 0, static_cast<size_t>(plane_stride));
        std::memset(lo, 0, static_cast<size_t>(plane_stride));
        continue;
      }
      const auto* src = reinterpret_cast<const uint16_t*>(c_.rows + (c0 + i) * c_.stride);
      if (i + 8 < nc)
        for (int64_t k = 0; k < plane_stride; k += 64)
          _mm_prefetch(reinterpret_cast<const char*>(src) + 8 * c_.stride + k, _MM_HINT_T0);
      for (int64_t k = 0; k < W; k += 32) {
        __m512i h, l;
        split32_f16(_mm512_loadu_si512(src + k), h, l);
        _mm512_store_si512(hi + k, h);
        _mm512_store_si512(lo + k, l);
      }
      tick(2);
    }
    for (int64_t b = 0; b < nb; ++b) {
      block_hi_[b] = planes + 16 * b * plane_stride;
      block_stride_[b] = plane_stride;
    }
  }

  // Scores of the chunk's blocks against the current group's query tiles (qb_) into s.
  ZM_AMX void scores(int64_t nb) {
    const uint8_t* qb = qb_;
    float* s = f(L_.s);
    for (int64_t b = 0; b < nb; b += 2) {
      const bool two = b + 1 < nb;
      const uint8_t* r0 = block_hi_[b];
      const uint8_t* r1 = two ? block_hi_[b + 1] : r0;
      const int64_t s0 = block_stride_[b], s1 = two ? block_stride_[b + 1] : s0;
      // A bf16 cache read in place: the next blocks' rows asked into L1 a line per row and step.
      const uint8_t* next = !c_.f16 && b + 2 < nb ? block_hi_[b + 2] : nullptr;
      const int64_t next_stride = next != nullptr ? block_stride_[b + 2] : 0;
      _tile_zero(0);
      _tile_zero(1);
      for (int64_t kt = 0; kt < L_.kt; ++kt) {
        const uint8_t* q = qb + kt * 2 * kTile;
        _tile_loadd(2, r0 + kt * 64, s0);
        _tile_loadd(3, r1 + kt * 64, s1);
        _tile_loadd(4, q, 64);
        _tile_loadd(5, q + kTile, 64);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(1, 3, 4);
        _tile_dpbf16ps(0, 2, 5);
        _tile_dpbf16ps(1, 3, 5);
        if (c_.f16) {
          _tile_loadd(6, r0 + lo_offset_ + kt * 64, s0);
          _tile_loadd(7, r1 + lo_offset_ + kt * 64, s1);
          _tile_dpbf16ps(0, 6, 4);
          _tile_dpbf16ps(1, 7, 4);
        }
        if (next != nullptr)
          for (int64_t i = 0; i < 32; ++i)
            _mm_prefetch(reinterpret_cast<const char*>(next) + i * next_stride + kt * 64, _MM_HINT_T0);
        tick(2 * parts());
      }
      _tile_stored(0, s + b * 256, 64);
      if (two) _tile_stored(1, s + (b + 1) * 256, 64);
    }
  }

  // Scaled scores to probabilities against the running maxima; rescales the running sums.
  ZM_AMX void softmax(int64_t g, int64_t nc, int64_t nb, bool first) {
    float* s = f(L_.s);
    float* mx = f(L_.stats) + g * 32;
    float* sum = mx + 16;
    const __m512 scale = _mm512_set1_ps(c_.scale);
    __m512 cm = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t i = 0; i < nc; ++i) {
      const __m512 v = _mm512_mul_ps(_mm512_load_ps(s + 16 * i), scale);
      _mm512_store_ps(s + 16 * i, v);
      cm = _mm512_max_ps(cm, v);
    }
    const __m512 old_max = first ? cm : _mm512_load_ps(mx);
    const __m512 new_max = _mm512_max_ps(old_max, cm);
    alpha_ = first ? _mm512_setzero_ps() : exp_nonpos(_mm512_sub_ps(old_max, new_max));
    __m512 l = _mm512_setzero_ps();
    for (int64_t i = 0; i < 16 * nb; ++i) {
      const __m512 p = i < nc ? exp_nonpos(_mm512_sub_ps(_mm512_load_ps(s + 16 * i), new_max)) : _mm512_setzero_ps();
      _mm512_store_ps(s + 16 * i, p);
      l = _mm512_add_ps(l, p);
    }
    const __m512 old_sum = first ? _mm512_setzero_ps() : _mm512_load_ps(sum);
    _mm512_store_ps(sum, _mm512_fmadd_ps(old_sum, alpha_, l));
    _mm512_store_ps(mx, new_max);
  }

  // Probability tiles of group g: per block and half (8 heads), row (h, t) holds p[j][h] in
  // slot 2j + t, hi and lo parts.
  ZM_AMX void probability_tiles(int64_t g, int64_t nb) {
    const float* s = f(L_.s);
    const int64_t heads = heads_in(g);
    for (int64_t b = 0; b < nb; ++b) {
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i) r[i] = _mm512_load_ps(s + b * 256 + 16 * i);
      transpose16(r);  // r[h]: head h's probabilities of the block's 16 rows
      const int64_t rows = heads > 8 ? 16 : 8;  // whole halves: the rows past the heads are 0
      for (int64_t h = 0; h < rows; ++h) {
        uint8_t* t = sc_ + L_.p + (b * 2 + h / 8) * 2 * kTile;
        const int64_t h8 = h % 8;
        __m256i hi, lo;
        split16(h < heads ? r[h] : _mm512_setzero_ps(), hi, lo);
        const __m512i zh = _mm512_cvtepu16_epi32(hi), zl = _mm512_cvtepu16_epi32(lo);
        _mm512_store_si512(t + (2 * h8) * 64, zh);
        _mm512_store_si512(t + (2 * h8 + 1) * 64, _mm512_slli_epi32(zh, 16));
        _mm512_store_si512(t + kTile + (2 * h8) * 64, zl);
        _mm512_store_si512(t + kTile + (2 * h8 + 1) * 64, _mm512_slli_epi32(zl, 16));
      }
    }
  }

  // Value sums of group g over the chunk, added into its running sums (scaled by alpha_): a
  // column tile at a time for both halves of the heads, so each load of a cache tile serves 16
  // heads (a tile per half and column group read the cache rows from L2 twice: MlaDecode f16, 16
  // heads, 512 positions 108-125 -> 90-95 us).
  ZM_AMX void values(int64_t g, int64_t nb, bool first) {
    const bool two = heads_in(g) > 8;
    float* ct = f(L_.ctmp);
    for (int64_t c = 0; c < L_.ct; ++c) {
      _tile_zero(0);
      _tile_zero(1);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* pt = sc_ + L_.p + b * 4 * kTile;
        const uint8_t* rows = block_hi_[b] + c * 64;
        const int64_t st = block_stride_[b];
        _tile_loadd(6, rows, st);
        _tile_loadd(2, pt, 64);
        _tile_loadd(3, pt + kTile, 64);
        _tile_dpbf16ps(0, 2, 6);
        _tile_dpbf16ps(0, 3, 6);
        if (two) {
          _tile_loadd(4, pt + 2 * kTile, 64);
          _tile_loadd(5, pt + 3 * kTile, 64);
          _tile_dpbf16ps(1, 4, 6);
          _tile_dpbf16ps(1, 5, 6);
        }
        if (c_.f16) {
          _tile_loadd(7, rows + lo_offset_, st);
          _tile_dpbf16ps(0, 2, 7);
          if (two) _tile_dpbf16ps(1, 4, 7);
        }
        tick((two ? 2 : 1) * parts());
      }
      _tile_stored(0, ct, 64);
      add_values(g, 0, c, ct, first);
      if (two) {
        _tile_stored(1, ct + 256, 64);
        add_values(g, 1, c, ct + 256, first);
      }
    }
  }

  // Column tile c of half hh (sums in `tile`) into the running sums: rows (h, 0) and (h, 1)
  // interleaved.
  ZM_AMX void add_values(int64_t g, int64_t hh, int64_t c, const float* tile, bool first) {
    const __m512i even = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i odd = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    alignas(64) float alpha[16];
    _mm512_store_ps(alpha, alpha_);
    const int64_t heads = heads_in(g);
    for (int64_t h8 = 0; h8 < 8 && 8 * hh + h8 < heads; ++h8) {
      const int64_t h = 8 * hh + h8;
      float* dst = f(L_.y) + (g * 16 + h) * c_.R + c * 32;
      const __m512 r0 = _mm512_load_ps(tile + (2 * h8) * 16);
      const __m512 r1 = _mm512_load_ps(tile + (2 * h8 + 1) * 16);
      const __m512 lo = _mm512_permutex2var_ps(r0, even, r1), hi = _mm512_permutex2var_ps(r0, odd, r1);
      if (first) {
        _mm512_store_ps(dst, lo);
        _mm512_store_ps(dst + 16, hi);
      } else {
        const __m512 a = _mm512_set1_ps(alpha[h]);
        _mm512_store_ps(dst, _mm512_fmadd_ps(_mm512_load_ps(dst), a, lo));
        _mm512_store_ps(dst + 16, _mm512_fmadd_ps(_mm512_load_ps(dst + 16), a, hi));
      }
    }
  }

  // y = running sums / softmax sums, and the statistics asked for.
  ZM_AMX void finish() {
    for (int64_t i = 0; i < c_.m; ++i) {
      const int64_t g = i / 16, h = i % 16;
      const float* st = f(L_.stats) + g * 32;
      const float inv = 1.0f / st[16 + h];
      const float* src = f(L_.y) + (g * 16 + h) * c_.R;
      float* dst = c_.y + i * c_.R;
      const __m512 v = _mm512_set1_ps(inv);
      for (int64_t k = 0; k < c_.R; k += 16) _mm512_storeu_ps(dst + k, _mm512_mul_ps(_mm512_load_ps(src + k), v));
      if (c_.smax != nullptr) c_.smax[i] = st[h];
      if (c_.inv != nullptr) c_.inv[i] = inv;
    }
  }

  const uint8_t* qb_ = nullptr;
  __m512 alpha_{};
};

#pragma GCC diagnostic pop

}  // namespace

bool amx_attend_fits(int64_t W, int64_t R) { return W > 0 && R > 0 && R <= W && W % 32 == 0 && R % 32 == 0; }

int64_t amx_attend_scratch_floats(int64_t m, int64_t W, int64_t R) { return (layout_for(m, W, R).total + 3) / 4; }

void amx_attend(const AmxAttnCall& c, float* scratch) {
  if (c.m <= 0 || c.n <= 0) return;
  Attend(c, reinterpret_cast<uint8_t*>(scratch)).run();
}

}  // namespace zenmoe
