// Decode attention on the AMX tile unit (Intel AMX-TILE + AMX-BF16), for caches of bf16 or f16
// rows: one token's query rows (a row per head) against n cache rows [c | k_pe], the scores and
// the value sums as tile products in bf16 with f32 sums.
//
// Exactness: a query element q (f32) is split into q_hi = bf16(q) and q_lo = bf16(q - q_hi),
// 16 significant bits together; an f16 cache element into c_hi + c_lo, which is exact (11
// bits); bf16 cache elements are exact as they are. A score sums c * q_hi + c * q_lo (bf16
// rows) or c_hi * q_hi + c_hi * q_lo + c_lo * q_hi (f16 rows, the dropped c_lo * q_lo is below
// 2^-16 of the product), the probabilities split the same way for the value sums. So the
// results agree with f32 arithmetic on the stored rows to about 2^-16 relative per product,
// where plain bf16 products would lose 3 bits of an f16 row and 16 of each query element.
//
// Layout of the products (TDPBF16PS: C[m][n] += sum over k of A[m][k] * B[k][n], B in pairs):
//   scores  A = 16 cache rows x 32 elements (straight from a bf16 cache, with its row stride),
//           B = 32 query elements of 16 heads in pairs; C[position][head]: the heads in the
//           lanes, one tile per 16 positions, W / 32 products (x2 or x3 for the split parts);
//   values  A = probabilities: row (h, t) holds p[position][h] in slot 2 * position + t and 0 in
//           the other (8 heads per tile), B = 16 cache rows x 32 value columns (the same rows,
//           no rearranging); C[(h, t)][n] = sum p * row[32 ct + 2n + t], interleaved into y.
// Cache rows are taken in chunks of kAmxAttnChunk positions with an online softmax between
// chunks (f16 rows are split into bf16 planes a chunk at a time, in scratch).
#pragma once

#include <cstdint>

namespace zenmoe {

struct AmxAttnCall {
  const float* q = nullptr;       // m query rows of W floats: [latent (R) | rope]
  int64_t m = 0;                  // query rows (heads), >= 1
  const uint8_t* rows = nullptr;  // cache row 0: W bf16 or f16 elements
  int64_t stride = 0;             // bytes between cache rows, a multiple of 2
  int64_t n = 0;                  // cache rows, >= 1
  int64_t W = 0, R = 0;           // row and value widths (amx_attend_fits)
  float scale = 1.0f;             // scores are scale * (q . row)
  bool f16 = false;               // f16 rows (else bf16)
  float* y = nullptr;             // m rows of R: sum_j softmax_j * row_j[0, R)
  float* smax = nullptr;          // optional, m floats: each row's largest scaled score
  float* inv = nullptr;           // optional, m floats: 1 / each row's softmax sum
  // Optional side stream: (address, bytes) pairs asked into L2 (prefetcht1) during the call,
  // spread evenly over its cache rows (the weights read after the attention).
  const int64_t* side = nullptr;
  int64_t side_ranges = 0;
};

inline constexpr int64_t kAmxAttnChunk = 128;

// Widths the tile kernels take: W and R multiples of 32, 0 < R <= W.
bool amx_attend_fits(int64_t W, int64_t R);
// Floats of 64-byte aligned scratch amx_attend needs for m query rows.
int64_t amx_attend_scratch_floats(int64_t m, int64_t W, int64_t R);
// The attention of c. The caller checked isa::host_supports(IsaLevel::kAmx) (which also
// obtained this process's permission to use the tile registers) and amx_attend_fits.
void amx_attend(const AmxAttnCall& c, float* scratch);

}  // namespace zenmoe
