// Reference dot products of a weight row with an activation row in the weight's
// vec_dot_type (spec §2.12). Integer inner sums are exact; the float combination per block is
// spelled out next to each function, since fast kernels are compared against it.
#include <cstring>

#include "kernels/ref/fp16.h"
#include "kernels/ref/kscales.h"
#include "kernels/ref/quant.h"

namespace zenmoe::ref {
namespace {

// 4-bit codes of sub-block s of a Q4_K/Q5_K super-block (no 5th bit).
inline int k_nibble(const uint8_t* qs, int s, int l) { return (qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 0x0F; }

// Σ_g bsums[g] * m[g/2]: the min term of Q4_K/Q5_K using the Q8_K per-16 sums.
int32_t k_min_term(const uint8_t* S, const BlockQ8_K& y) {
  int32_t sumi = 0;
  for (int g = 0; g < 16; ++g) {
    uint8_t sc, m;
    kscale_get(S, g / 2, &sc, &m);
    sumi += static_cast<int32_t>(y.bsums[g]) * m;
  }
  return sumi;
}

}  // namespace

// Per block: sumf += (f16(d_w) * f16(d_x)) * Σ q_w*q_x.
float vec_dot_q4_0(const void* w, const void* x, int64_t n) {
  const BlockQ4_0* a = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((a[i].qs[j] & 0x0F) - 8) * b[i].qs[j];
      sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
    }
    sumf += (fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

float vec_dot_q5_0(const void* w, const void* x, int64_t n) {
  const BlockQ5_0* a = static_cast<const BlockQ5_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    uint32_t qh;
    std::memcpy(&qh, a[i].qh, 4);
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = ((a[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
      const int q1 = ((a[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      sumi += q0 * b[i].qs[j] + q1 * b[i].qs[j + 16];
    }
    sumf += (fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

float vec_dot_q8_0(const void* w, const void* x, int64_t n) {
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += a[i].qs[j] * b[i].qs[j];
    sumf += (fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

// The K-quant dots follow ggml's generic C code bit for bit: integer products are spread
// over 8 lanes (element i of a super-block goes to lane i % 8, already multiplied by its
// sub-block scale), each super-block adds (f16(d) * d8) * lane[l] to a float partial sum
// per lane, the min terms are subtracted from a separate float total, and the 8 lane sums are
// added to that total at the end in lane order. With this order the worked example of
// spec §2.12 gives exactly the -358.327148 ggml prints.
struct KLanes {
  float lane[8] = {};
  float total = 0.0f;
  void add_block(float d, const int32_t* lanes) {
    for (int l = 0; l < 8; ++l) lane[l] += d * static_cast<float>(lanes[l]);
  }
  float finish() const {
    float s = total;
    for (int l = 0; l < 8; ++l) s += lane[l];
    return s;
  }
};

// Q4_K / Q5_K per super-block: lanes of sc[s] * q[i]*q8[i] and
// sumi_min = Σ_g bsums[g] * m[g/2]; total -= (f16(dmin) * d8) * sumi_min.
template <bool kFive, class Block>
static float vec_dot_q45_k(const Block* a, const BlockQ8_K* b, int64_t nb) {
  KLanes acc;
  for (int64_t i = 0; i < nb; ++i) {
    int32_t lanes[8] = {};
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      kscale_get(a[i].scales, s, &sc, &m);
      for (int l = 0; l < 32; ++l) {
        int q = k_nibble(a[i].qs, s, l);
        if constexpr (kFive) q |= ((a[i].qh[l] >> s) & 1) << 4;
        lanes[l % 8] += sc * (q * b[i].qs[32 * s + l]);
      }
    }
    acc.add_block(fp16_to_fp32(a[i].d) * b[i].d, lanes);
    const int32_t sumi_min = k_min_term(a[i].scales, b[i]);
    acc.total -= (fp16_to_fp32(a[i].dmin) * b[i].d) * static_cast<float>(sumi_min);
  }
  return acc.finish();
}

float vec_dot_q4_K(const void* w, const void* x, int64_t n) {
  return vec_dot_q45_k<false>(static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(x), n / kQK_K);
}

float vec_dot_q5_K(const void* w, const void* x, int64_t n) {
  return vec_dot_q45_k<true>(static_cast<const BlockQ5_K*>(w), static_cast<const BlockQ8_K*>(x), n / kQK_K);
}

// Q6_K per super-block: lanes of scales[i/16] * (q6[i]-32)*q8[i], no min term.
float vec_dot_q6_K(const void* w, const void* x, int64_t n) {
  const BlockQ6_K* a = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  KLanes acc;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t lanes[8] = {};
    for (int idx = 0; idx < kQK_K; ++idx) {
      const int h = idx / 128, r = idx % 128, quarter = r / 32, l = r % 32;
      const uint8_t lo_byte = a[i].ql[64 * h + l + 32 * (quarter & 1)];
      const int lo = (quarter < 2) ? (lo_byte & 0x0F) : (lo_byte >> 4);
      const int hi = (a[i].qh[32 * h + l] >> (2 * quarter)) & 3;
      lanes[idx % 8] += a[i].scales[idx / 16] * (((lo | (hi << 4)) - 32) * b[i].qs[idx]);
    }
    acc.add_block(fp16_to_fp32(a[i].d) * b[i].d, lanes);
  }
  return acc.finish();
}

// Per 32-element sub-block: sumf += (f16(d) * d8 * (ls - 32)) * Σ kv[q]*q8.
float vec_dot_iq4_xs(const void* w, const void* x, int64_t n) {
  const BlockIQ4_XS* a = static_cast<const BlockIQ4_XS*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  const int8_t* kv = iq4nl_codebook();
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d4d8 = fp16_to_fp32(a[i].d) * b[i].d;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((a[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) |
                     (((a[i].scales_h >> (2 * ib)) & 3) << 4);
      const uint8_t* qs = a[i].qs + 16 * ib;
      const int8_t* q8 = b[i].qs + 32 * ib;
      int32_t sumi = 0;
      for (int j = 0; j < 16; ++j) sumi += q8[j] * kv[qs[j] & 0x0F] + q8[j + 16] * kv[qs[j] >> 4];
      sumf += (d4d8 * static_cast<float>(ls - 32)) * static_cast<float>(sumi);
    }
  }
  return sumf;
}

}  // namespace zenmoe::ref
