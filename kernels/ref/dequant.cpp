// Reference dequantisation of the block formats, in the exact f32 order of operations of
// spec §2 (each product rounded to f32 where the spec says so), so results are bit-identical
// to ggml's to_float.
#include <cstring>

#include "kernels/ref/fp16.h"
#include "kernels/ref/kscales.h"
#include "kernels/ref/quant.h"

namespace zenmoe::ref {
namespace {

template <class Block>
const Block* blocks(const void* p) { return static_cast<const Block*>(p); }

// The 16 IQ4_NL / IQ4_XS codebook values (spec §2.10).
constexpr int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace

const int8_t* iq4nl_codebook() { return kIq4nl; }

void to_float_q4_0(const void* src, float* y, int64_t n) {
  const BlockQ4_0* b = blocks<BlockQ4_0>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((b[i].qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void to_float_q5_0(const void* src, float* y, int64_t n) {
  const BlockQ5_0* b = blocks<BlockQ5_0>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const int hi0 = (qh >> j) & 1, hi1 = (qh >> (j + 16)) & 1;
      y[j] = static_cast<float>(((b[i].qs[j] & 0x0F) | (hi0 << 4)) - 16) * d;
      y[j + 16] = static_cast<float>(((b[i].qs[j] >> 4) | (hi1 << 4)) - 16) * d;
    }
  }
}

void to_float_q8_0(const void* src, float* y, int64_t n) {
  const BlockQ8_0* b = blocks<BlockQ8_0>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// Q4_K and Q5_K share everything but the 5th bit: y = (d*sc)*q - (dmin*m).
template <bool kFive, class Block>
static void to_float_q45_k(const Block* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      kscale_get(b[i].scales, s, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      const int c = s / 2, shift = (s & 1) * 4;
      for (int l = 0; l < 32; ++l) {
        int q = (b[i].qs[32 * c + l] >> shift) & 0x0F;
        if constexpr (kFive) q |= ((b[i].qh[l] >> s) & 1) << 4;
        y[32 * s + l] = d1 * static_cast<float>(q) - m1;
      }
    }
  }
}

void to_float_q4_K(const void* src, float* y, int64_t n) {
  to_float_q45_k<false>(blocks<BlockQ4_K>(src), y, n / kQK_K);
}

void to_float_q5_K(const void* src, float* y, int64_t n) {
  to_float_q45_k<true>(blocks<BlockQ5_K>(src), y, n / kQK_K);
}

void to_float_q6_K(const void* src, float* y, int64_t n) {
  const BlockQ6_K* b = blocks<BlockQ6_K>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d);
    for (int idx = 0; idx < kQK_K; ++idx) {
      const int h = idx / 128, r = idx % 128, quarter = r / 32, l = r % 32;
      const uint8_t lo_byte = b[i].ql[64 * h + l + 32 * (quarter & 1)];
      const int lo = (quarter < 2) ? (lo_byte & 0x0F) : (lo_byte >> 4);
      const int hi = (b[i].qh[32 * h + l] >> (2 * quarter)) & 3;
      const int q = (lo | (hi << 4)) - 32;
      // (d * scale) first, then * q: the order ggml uses.
      y[idx] = d * static_cast<float>(b[i].scales[idx / 16]) * static_cast<float>(q);
    }
  }
}

void to_float_q8_K(const void* src, float* y, int64_t n) {
  const BlockQ8_K* b = blocks<BlockQ8_K>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K)
    for (int j = 0; j < kQK_K; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
}

void to_float_iq4_xs(const void* src, float* y, int64_t n) {
  const BlockIQ4_XS* b = blocks<BlockIQ4_XS>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) |
                     (((b[i].scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* qs = b[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[32 * ib + j] = dl * static_cast<float>(kIq4nl[qs[j] & 0x0F]);
        y[32 * ib + 16 + j] = dl * static_cast<float>(kIq4nl[qs[j] >> 4]);
      }
    }
  }
}

}  // namespace zenmoe::ref
