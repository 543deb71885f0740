// Decode attention over F32, F16, BF16 or Q8_0 cache rows with the heads in the vector lanes.
//
// The m query rows of one token (one per head) are transposed once, so that lane k of a vector
// is head k. Per tile of cache rows (widened to F32 once, shared by every head):
//   scores   S[j][k] = q_k · row_j: each row element is one broadcast multiplied into every
//            head's lane at once, with no horizontal sums;
//   softmax  online over the tiles: the running maxima, sums and rescale factors are vectors
//            over the heads;
//   values   Yt[c][k] += P[j][k] * row_j[c]: each row element again one broadcast for all heads.
// The cache is read once, the tile is widened once, and every multiply-add is a full-width
// FMA. Finally Yt (columns by heads) is divided by the sums and transposed into y.
#pragma once

#include <cstdint>
#include <utility>

#include "runtime/executor.h"

namespace zenmoe {

// Working memory of one thread (64-byte aligned floats, grown on demand).
struct FlashScratch {
  float* qt = nullptr;     // queries transposed: [width][lanes]
  float* tile = nullptr;   // widened cache rows: [kFlashTileRows][width]
  float* s = nullptr;      // scores, then probabilities, of the tile: [kFlashTileRows][lanes]
  float* yt = nullptr;     // value sums: [v_width][lanes]
  float* stats = nullptr;  // running maxima, sums and rescale factors: 3 x lanes
  void reserve(int64_t width, int64_t v_width, int64_t lanes);
  FlashScratch() = default;
  FlashScratch(FlashScratch&& o) noexcept { *this = std::move(o); }
  FlashScratch& operator=(FlashScratch&& o) noexcept;
  ~FlashScratch();

 private:
  float* block_ = nullptr;
  int64_t floats_ = 0;
};

// Cache rows per tile (a multiple of every register block's row count).
inline constexpr int64_t kFlashTileRows = 48;

// AVX-512 F/BW only: the caller checked the ISA model. kv is any cache type (Q8_0: width a
// multiple of 32); rows are `width` elements, `row_bytes` apart. For the m query rows q_k (width floats
// each, dense) over cache rows j < n (n >= 1): y[k * v_width + c] = sum_j softmax_j(scale *
// q_k · row_j) * row_j[c] for c < v_width (the first v_width elements of a row are its value).
// When smax / inv are given, smax[k] is the largest scaled score and inv[k] 1 / the sum of
// exp(scaled score - smax[k]).
void kv_flash_decode_avx512(const float* q, int64_t m, const uint8_t* rows, int64_t row_bytes, KvCacheType kv,
                            int64_t n, int64_t width, int64_t v_width, float scale, float* y, FlashScratch& sc,
                            float* smax = nullptr, float* inv = nullptr);

}  // namespace zenmoe
